// Stand-in for actions/cache/save: the same @actions/cache call, see README.md.
const core = require("@actions/core");
const cache = require("@actions/cache");

(async () => {
  try {
    const paths = core.getMultilineInput("path", { required: true });
    const key = core.getInput("key", { required: true });
    const id = await cache.saveCache(paths, key);
    core.info(`Cache saved with key: ${key} (id ${id})`);
  } catch (error) {
    core.setFailed(error.message);
  }
})();
