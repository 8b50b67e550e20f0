// Stand-in for actions/cache/restore: the same @actions/cache calls, see README.md.
const core = require("@actions/core");
const cache = require("@actions/cache");

(async () => {
  try {
    const paths = core.getMultilineInput("path", { required: true });
    const key = core.getInput("key", { required: true });
    const restoreKeys = core.getMultilineInput("restore-keys");
    core.setOutput("cache-primary-key", key);
    const matched = await cache.restoreCache(paths, key, restoreKeys);
    if (!matched) {
      core.info(`Cache not found for input keys: ${[key, ...restoreKeys].join(", ")}`);
      core.setOutput("cache-hit", "false");
      return;
    }
    core.setOutput("cache-matched-key", matched);
    core.setOutput("cache-hit", String(matched === key));
    core.info(`Cache restored from key: ${matched}`);
  } catch (error) {
    core.setFailed(error.message);
  }
})();
