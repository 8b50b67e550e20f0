'use strict';
// gpu-monitor as one `uses:` line. Composite actions have no post step, so this JavaScript
// action exists only for its `post:`: main.js runs `mode: start`, post.js (at the end of the
// job, `post-if: always()`: after a failed step and after a cancellation too) `mode: report`.
// Both run the same Python as actions/gpu-monitor: scripts/bootstrap.sh, then
// scripts/run.py with the inputs as INPUT_* variables. Plain Node, no npm packages: nothing
// to install, vendor or audit; the inputs come from the environment, the outputs, summary
// and annotations are written by the Python (GITHUB_OUTPUT, GITHUB_STEP_SUMMARY, stdout).

const { spawnSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');

const ROOT = path.resolve(__dirname, '..', '..', '..');

// The runner passes a JavaScript action's input `price-per-hour` as INPUT_PRICE-PER-HOUR;
// gpu-ci reads INPUT_PRICE_PER_HOUR, as the composite actions pass it.
function inputs(env) {
  const out = {};
  for (const [key, value] of Object.entries(env)) {
    if (key.startsWith('INPUT_')) out[key.replace(/[- ]/g, '_')] = value;
  }
  return out;
}

// NAME=value lines, as scripts/bootstrap.py and provision-python.sh write them.
function parseEnvFile(text) {
  const out = {};
  for (const line of text.split('\n')) {
    const at = line.indexOf('=');
    if (at > 0) out[line.slice(0, at)] = line.slice(at + 1);
  }
  return out;
}

function failed(what, result) {
  if (result.error) return `${what} could not run: ${result.error.message}`;
  if (result.signal) return `${what} was killed by ${result.signal}`;
  return result.status === 0 ? '' : `${what} exited with status ${result.status}`;
}

// scripts/bootstrap.sh, as the composite action's first step runs it. Its exports go to a
// file of ours first (this process needs GPU_CI_PYTHON now, not in the next step), then to
// the job's GITHUB_ENV, so that later gpu-ci actions of this checkout reuse the venv.
function bootstrap(env) {
  const dir = fs.mkdtempSync(path.join(env.RUNNER_TEMP || os.tmpdir(), 'gpu-ci-job-'));
  const file = path.join(dir, 'env');
  try {
    fs.writeFileSync(file, '', { mode: 0o600 });
    const result = spawnSync('bash', [path.join(ROOT, 'scripts', 'bootstrap.sh'), 'gpu-monitor'], {
      stdio: 'inherit',
      env: { ...env, GITHUB_ENV: file, GPU_CI_INSTALL_PYTHON: env['INPUT_INSTALL-PYTHON'] || 'auto' },
    });
    const problem = failed('scripts/bootstrap.sh', result);
    if (problem) return { problem };
    const text = fs.readFileSync(file, 'utf8');
    if (env.GITHUB_ENV && text) fs.appendFileSync(env.GITHUB_ENV, text);
    return { exported: parseEnvFile(text) };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

// What main leaves for post (GITHUB_STATE; the runner passes it back as STATE_<name>): a
// start that failed or never ran (the job was cancelled during it) has nothing to report,
// and its own step already said why.
const STARTED = 'gpu_ci_started';

function run(mode, env = process.env) {
  if (mode === 'report' && env.GITHUB_STATE !== undefined && env[`STATE_${STARTED}`] !== 'true') {
    process.stdout.write('::warning title=gpu-monitor (report)::gpu-monitor did not start in ' +
      'this job (see its main step): nothing to report.\n');
    return 0;
  }
  const boot = bootstrap(env);
  if (boot.problem) {
    process.stdout.write(`::error title=gpu-monitor (${mode})::${boot.problem}\n`);
    return 1;
  }
  const stepEnv = { ...env, ...boot.exported, ...inputs(env), INPUT_MODE: mode };
  if (!stepEnv.GPU_CI_PYTHON) {
    process.stdout.write(`::error title=gpu-monitor (${mode})::the bootstrap named no Python\n`);
    return 1;
  }
  const result = spawnSync(stepEnv.GPU_CI_PYTHON,
    [path.join(ROOT, 'scripts', 'run.py'), 'gpu-monitor'], { stdio: 'inherit', env: stepEnv });
  const problem = failed(`gpu-monitor mode: ${mode}`, result);
  if (problem && (result.error || result.signal)) {
    process.stdout.write(`::error title=gpu-monitor (${mode})::${problem}\n`);
  }
  if (problem) return result.status || 1;
  if (mode === 'start' && env.GITHUB_STATE) fs.appendFileSync(env.GITHUB_STATE, `${STARTED}=true\n`);
  return 0;
}

module.exports = { run, inputs, parseEnvFile };
