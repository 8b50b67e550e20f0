'use strict';
// gpu-monitor's one-step form, main: start the sampler (see gpu-monitor.js).
process.exitCode = require('./gpu-monitor.js').run('start');
