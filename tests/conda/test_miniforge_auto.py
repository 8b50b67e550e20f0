"""``miniforge: auto``, the default: Miniforge is installed only where the job needs it
(``engine: conda``, or ``miniforge: true`` for ``conda`` on ``PATH`` in later steps), and
then on a thread of its own, so that it overlaps the environment's install."""

from __future__ import annotations

import io
import threading
from pathlib import Path

import pytest

from gpu_ci.commands import setup_conda_from_lock as command
from gpu_ci.conda import install as env_install
from gpu_ci.conda import miniforge
from gpu_ci.conda import options as conda_options
from gpu_ci.downloads import Downloader
from gpu_ci.errors import GpuCiError, UsageError
from gpu_ci.runtime import Runtime
from testkit.conda.jobs import FAKE_MF


@pytest.mark.parametrize(
    "engine,value,installs",
    [
        ("rattler", "auto", False),
        ("rattler", "true", True),
        ("rattler", "false", False),
        ("conda", "auto", True),
        ("conda", "true", True),
        ("rattler", "AUTO", False),
        ("conda", " Auto ", True),
    ],
)
def test_miniforge_is_installed_only_where_the_job_needs_it(engine, value, installs):
    assert conda_options.wants_miniforge(engine, value) is installs


@pytest.mark.parametrize(
    "engine,value,message",
    [
        ("conda", "false", "engine: conda needs miniforge: true or auto"),
        ("rattler", "yes", "input 'miniforge' must be one of auto, true, false; got 'yes'"),
    ],
)
def test_a_contradiction_or_a_typo_is_a_usage_error(engine, value, message):
    with pytest.raises(UsageError, match=message):
        conda_options.wants_miniforge(engine, value)


def test_the_cli_refuses_a_miniforge_typo(run_cli, tmp_path):
    lock = tmp_path / "lock.txt"
    lock.write_text("@EXPLICIT\n")
    result = run_cli(
        ["setup-conda-from-lock", "--lock-file", str(lock), "--dry-run", "true"],
        {"INPUT_MINIFORGE": "yes", "RUNNER_TOOL_CACHE": str(tmp_path / "tc")},
    )
    assert result.returncode == 2
    assert "input 'miniforge' of setup-conda-from-lock must be one of auto, true, false" in (
        result.stdout + result.stderr
    )


def _options(tmp_path: Path, engine: str, value: str) -> conda_options.SetupOptions:
    raw = conda_options.RawOptions(
        lock_file="lock.txt",
        platform="linux-64",
        categories=["main"],
        engine=engine,
        miniforge=value,
        miniforge_version=FAKE_MF,
        installer_url="http://127.0.0.1:9/never-fetched.sh",
        installer_sha256="0" * 64,
        activate=False,
        dry_run=False,
        root=str(tmp_path / "root"),
        pkgs_dir="",
        prefix="",
        environment_name="ci",
    )
    return conda_options.build(raw, {})


class Fakes:
    """Stand-ins for the environment's install and Miniforge's, recording the order."""

    def __init__(self, monkeypatch, tmp_path: Path, env_side, mf_side) -> None:
        self.events: list[str] = []
        self.conda_given: object = "unset"
        self.downloaders: list[object] = []
        mf = miniforge.Miniforge(tmp_path / "root", tmp_path / "root/bin/conda", FAKE_MF, "", 0, 0)

        def fake_env(plan, prefix, pkgs_dir, env, *, method, **kw):
            self.events.append("env start")
            self.conda_given = method.conda
            self.downloaders.append(method.fetching.downloader)
            env_side()
            self.events.append("env end")
            return env_install.InstallReport()

        def fake_mf(found, root, env, policy, downloader=None):
            self.downloaders.append(downloader)
            self.events.append("mf start")
            mf_side()
            self.events.append("mf end")
            return mf

        monkeypatch.setattr(env_install, "install", fake_env)
        monkeypatch.setattr(miniforge, "install", fake_mf)
        self.mf = mf


def test_miniforge_installs_while_the_environment_does(monkeypatch, tmp_path):
    both = threading.Barrier(2, timeout=30)  # broken, not passed, if one waits for the other
    fakes = Fakes(monkeypatch, tmp_path, both.wait, both.wait)
    opts = _options(tmp_path, "rattler", "true")
    phases: dict[str, float] = {}
    run_downloader = Downloader()
    report, mf = command.install(Runtime({}, io.StringIO()), opts, None, {}, phases, run_downloader)
    assert mf is fakes.mf and fakes.conda_given is None
    assert sorted(fakes.events[:2]) == ["env start", "mf start"]
    # one download layer for the run: Miniforge's installer follows the same mirrors,
    # credentials and redirect rule as the packages
    assert fakes.downloaders == [run_downloader, run_downloader]
    assert "miniforge" in phases and (opts.root / ".condarc").exists()


def test_engine_conda_waits_for_miniforge_and_uses_its_conda(monkeypatch, tmp_path):
    fakes = Fakes(monkeypatch, tmp_path, lambda: None, lambda: None)
    report, mf = command.install(
        Runtime({}, io.StringIO()), _options(tmp_path, "conda", "auto"), None, {}, {}, Downloader()
    )
    assert fakes.events == ["mf start", "mf end", "env start", "env end"]
    assert fakes.conda_given == fakes.mf.conda


def test_the_default_installs_no_miniforge(monkeypatch, tmp_path):
    fakes = Fakes(monkeypatch, tmp_path, lambda: None, lambda: None)
    opts = _options(tmp_path, "rattler", "auto")
    report, mf = command.install(Runtime({}, io.StringIO()), opts, None, {}, {}, Downloader())
    assert mf is None and fakes.events == ["env start", "env end"]
    assert not (opts.root / ".condarc").exists()


def test_a_failed_environment_waits_for_miniforge_to_finish(monkeypatch, tmp_path):
    """The job fails with the environment's error, but not while Miniforge's installer is
    still writing the root: Miniforge here finishes only once someone waits for it."""
    waited = threading.Event()
    real_result = miniforge.Pending.result

    def result(self):
        waited.set()
        return real_result(self)

    def env_fails():
        raise GpuCiError("the environment failed")

    monkeypatch.setattr(miniforge.Pending, "result", result)
    fakes = Fakes(monkeypatch, tmp_path, env_fails, lambda: waited.wait(30))
    with pytest.raises(GpuCiError, match="the environment failed"):
        command.install(
            Runtime({}, io.StringIO()),
            _options(tmp_path, "rattler", "true"),
            None,
            {},
            {},
            Downloader(),
        )
    assert fakes.events[-1] == "mf end"


def test_the_cache_key_output_says_whether_the_installer_is_in_the_cache():
    from gpu_ci.conda import cachekey

    def key(miniforge: str, engine: str = "rattler") -> str:
        inputs = {
            "platform": "",
            "engine": engine,
            "miniforge": miniforge,
            "miniforge-version": FAKE_MF,
            "categories": "main",
        }
        return cachekey.packages_key(cachekey.KeyInputs.of(inputs, {}, "ab" * 32, ""))

    on = key("true")
    assert f"-rattler-mf{FAKE_MF}+installer-main-" in on
    assert key("auto") == on.replace("+installer", "")
    assert "+installer-" in key("auto", "conda") and "+installer" not in key("false")


# -- through the CLI, against the local channel ------------------------------------------------


def test_the_default_job_gets_no_miniforge_and_true_gets_a_cached_one(
    setup, channel, installer, tmp_path
):
    url, sha = installer
    name = url.rsplit("/", 1)[1]
    lock = channel.explicit_lock(["libhello"])
    common = ("--installer-url", url, "--miniforge-version", FAKE_MF)
    pkgs = tmp_path / "pkgs"
    before = len(channel.server.log)  # the channel serves other tests of this worker too
    default = setup(lock, "--miniforge", "auto", *common, "--pkgs-dir", str(pkgs))
    assert default.returncode == 0, default.stdout + default.stderr
    assert default.outputs["conda"] == "" and not any("condabin" in p for p in default.github_path)
    assert "not installed (`miniforge: true` puts conda on PATH)" in default.summary
    assert not [p for p, _ in channel.server.log[before:] if p.endswith("/" + name)]
    on_path = setup(lock, "--miniforge", "true", *common, "--pkgs-dir", str(pkgs))
    assert on_path.returncode == 0, on_path.stdout + on_path.stderr
    conda = Path(on_path.outputs["conda"])
    assert str(conda.parent.parent / "condabin") in on_path.github_path
    kept = pkgs / miniforge.INSTALLERS / FAKE_MF / name
    assert kept.exists()  # in the package cache, which cache: true saves
    # a fresh root on the same package cache (a restored cache: true) downloads it no more
    again = setup(
        lock,
        "--miniforge",
        "true",
        *common,
        "--pkgs-dir",
        str(pkgs),
        "--root",
        str(tmp_path / "r2"),
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert "installer cached" in again.summary
    assert len([p for p, _ in channel.server.log[before:] if p.endswith("/" + name)]) == 1
