'use strict';
// gpu-monitor's one-step form, post (at the end of the job): report (see gpu-monitor.js).
process.exitCode = require('./gpu-monitor.js').run('report');
