# ruff: noqa
from tests.test_setup_conda import channel, job
from tests.test_setup_conda_cache_attacks import big, _asked, _big_lock
def test_dbg(channel, big, tmp_path):
    channel.server.fail(f"big/noarch/{big.filename}", "trickle:3")
    rc, out = job(_big_lock(channel, big, tmp_path), tmp_path / "env", tmp_path / "pkgs", env={"GPU_CI_HTTP_TIMEOUT": "1"})
    print(out[:3000], _asked(channel, big), channel.server.seen)
