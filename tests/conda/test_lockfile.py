"""Lock text → install plan, over the real lock files in ../shared/fixtures/lockfiles
(conda-lock's and setup-micromamba's own test locks; skipped where ../shared is absent)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpu_ci import urls
from gpu_ci.conda import lockfile, pipeline
from gpu_ci.errors import GpuCiError
from testkit.shared import lock_file, shared_params

LOCKS = [  # pixi.lock files: tests/conda/test_pixi_lock.py
    p
    for p in shared_params("fixtures/lockfiles")
    if not (p.values[0] is not None and p.values[0].name.endswith(".pixi.lock"))
]
UNIFIED = shared_params("fixtures/lockfiles", "*.yml")


def load(name: str) -> tuple[lockfile.LockFile, str]:
    text = lock_file(name).read_text()
    return lockfile.parse(text, name), text


@pytest.mark.parametrize("path", LOCKS, ids=lambda p: p.name)
def test_every_real_lock_parses_and_plans(path):
    text = path.read_text()
    lock = lockfile.parse(text, path.name)
    assert lock.kind == ("explicit" if path.suffix == ".lock" else "unified")
    platform = lock.platforms[0]
    plan = lockfile.plan(lock, text, platform, ["main"], path.name)
    assert plan.count > 0
    assert all(e.md5 or e.sha256 for e in plan.conda)
    assert all(not e.name.startswith("__") for e in plan.conda)
    assert plan.lock_sha256 == lockfile.lock_sha256(text)


def _conda_lock_model(path: Path):
    """conda-lock's own model of a lock (v1 files are upgraded as conda-lock does; a file
    without ``version`` -- older conda-lock wrote none -- is read as version 1)."""
    import yaml

    models = pytest.importorskip("conda_lock.lockfile", reason="conda-lock (Python>=3.10)")
    from conda_lock.lockfile.v1.models import Lockfile as LockfileV1
    from conda_lock.lockfile.v2prelim.models import Lockfile as LockfileV2

    content = yaml.safe_load(path.read_text())
    version = content.pop("version", 1)
    if version == 2:
        return LockfileV2.model_validate(content)
    return models.lockfile_v1_to_v2(LockfileV1.model_validate(content))


def _conda_lock_install_selection(path: Path, platform: str, cats: tuple[str, ...]):
    """What ``conda-lock install [--dev] [-e X]`` renders for conda to install."""
    from conda_lock.conda_lock import render_lockfile_for_platform

    lines = render_lockfile_for_platform(
        lockfile=_conda_lock_model(path),
        include_dev_dependencies="dev" in cats,
        extras=set(cats) - {"main", "dev"},
        kind="explicit",
        platform=platform,
        suppress_warning_for_pip_and_explicit=True,
    )
    conda = [line.rsplit("#", 1)[0] for line in lines if line.startswith(("http", "file"))]
    pip = [
        line.split(" @ ", 1)[1].rsplit("#sha256=", 1)[0]
        for line in lines
        if line.startswith("# pip ")
    ]
    return conda, pip


def _subsets(categories: tuple[str, ...]):
    import itertools

    others = [c for c in categories if c != "main"]
    for n in range(len(others) + 1):
        yield from itertools.combinations(others, n)


@pytest.mark.parametrize("path", UNIFIED, ids=lambda p: p.name)
@pytest.mark.slow
def test_selection_is_conda_lock_installs_for_every_platform_and_category_set(path):
    """Every platform x every set of categories: the same packages as conda-lock install,
    each once, whether or not 'main' is named."""
    text = path.read_text()
    lock = lockfile.parse(text, path.name)
    checked = 0
    for platform in lock.platforms:
        for extra in _subsets(lockfile.lock_categories(lock)):
            theirs_conda, theirs_pip = _conda_lock_install_selection(
                path, platform, ("main", *extra)
            )
            for asked in (list(extra), ["main", *extra]):
                mine = lockfile.plan(lock, text, platform, asked)
                urls_ = [e.url for e in mine.conda]
                assert len(urls_) == len(set(urls_)), "a package planned twice"
                assert sorted(urls_) == sorted(theirs_conda), (platform, asked)
                assert sorted(p.url for p in mine.pip) == sorted(theirs_pip), (platform, asked)
                assert mine.categories[0] == "main"
                checked += 1
    assert checked >= len(lock.platforms)


def test_multiple_categories_lock_plans_each_package_once():
    """conda-lock 2 lists a package once per category (libblas in dev and in test). The
    whole lock of conda-lock's tests (115 entries, 101 packages on linux-64) is read from
    ../shared, no longer a 16-entry excerpt of it (12 packages)."""
    lock, text = load("conda-lock.test-multiple-categories.conda-lock.yml")
    assert lockfile.lock_categories(lock) == ("main", "dev", "test")
    plan = lockfile.plan(lock, text, "linux-64", ["main", "dev", "test"])
    names = [e.name for e in plan.conda]
    assert len(names) == len(set(names)) == 101
    assert names.count("libblas") == 1
    dev_only = lockfile.plan(lock, text, "linux-64", ["dev"])
    assert {"python", "tzdata", "astropy", "libblas"} <= {e.name for e in dev_only.conda}
    assert dev_only.categories == ("main", "dev")


def test_unknown_category_lists_the_locks_categories():
    lock, text = load("conda-lock.test-multiple-categories.conda-lock.yml")
    with pytest.raises(GpuCiError, match=r"no category 'tests'; it has main, dev, test"):
        lockfile.plan(lock, text, "linux-64", ["main", "tests"])
    explicit, etext = load("conda-lock.zlib.conda-linux-64.lock")
    with pytest.raises(GpuCiError, match="an explicit lock has no categories"):
        lockfile.plan(explicit, etext, "linux-64", ["dev"])


def test_explicit_archive_of_another_subdir_is_refused():
    lock, text = load("conda-lock.zlib.conda-linux-64.lock")
    bad = text.replace("/linux-64/libzlib-", "/osx-arm64/libzlib-")
    with pytest.raises(
        GpuCiError,
        match=r"libzlib-.* comes from osx-arm64 subdir .* neither "
        r"linux-64 nor noarch",
    ):
        lockfile.plan(lockfile.parse(bad), bad, "linux-64", [])


@pytest.mark.parametrize("version", ["1", "2", 2])
def test_lock_version_as_string_or_two_is_accepted(version):
    lock, text = load("conda-lock.test-multiple-categories.conda-lock.yml")
    changed = text.replace("\nversion: 1\n", f"\nversion: {version!r}\n")
    assert changed != text
    # the main category of the whole lock: 20 packages (4 in the former excerpt)
    assert lockfile.plan(lockfile.parse(changed), changed, "linux-64", []).count == 20


def test_unsupported_lock_version_names_the_supported_ones():
    lock, text = load("conda-lock.test-multiple-categories.conda-lock.yml")
    changed = text.replace("\nversion: 1\n", "\nversion: 3\n")
    with pytest.raises(GpuCiError, match=r"version 3 is not supported \(versions 1 and 2"):
        lockfile.parse(changed)


def test_plan_keeps_the_lock_order():
    import yaml

    lock, text = load("conda-lock.test-explicit-toposorted.conda-lock.yml")
    plan = lockfile.plan(lock, text, "linux-64", ["main"])
    in_file = [
        p["url"]
        for p in yaml.safe_load(text)["package"]
        if p["platform"] == "linux-64" and p["manager"] == "conda"
    ]
    assert [e.url for e in plan.conda] == in_file


def test_explicit_lock_entries():
    lock, text = load("conda-lock.zlib.conda-linux-64.lock")
    plan = lockfile.plan(lock, text, "linux-64", ["main"])
    assert [e.name for e in plan.conda] == [
        "_libgcc_mutex",
        "libgomp",
        "_openmp_mutex",
        "libgcc-ng",
        "libzlib",
        "zlib",
    ]
    first = plan.conda[0]
    assert (first.version, first.build, first.subdir) == ("0.1", "conda_forge", "linux-64")
    assert first.md5 == "d7c89558ba9fa0495403155b64376d81"
    assert first.channel == "https://conda.anaconda.org/conda-forge"


def test_explicit_lock_for_another_platform_is_refused():
    lock, text = load("conda-lock.zlib.conda-linux-64.lock")
    with pytest.raises(
        GpuCiError, match="explicit lock for linux-64, but the platform is linux-aarch64"
    ):
        lockfile.plan(lock, text, "linux-aarch64", ["main"])


def test_platform_missing_from_a_unified_lock_lists_the_locked_ones():
    lock, text = load("conda-lock.test-install-with-pip-deps.conda-lock.yml")
    with pytest.raises(
        GpuCiError, match="no packages for win-64; it locks linux-64, linux-aarch64"
    ):
        lockfile.plan(lock, text, "win-64", ["main"])


def test_categories_select_dev_packages():
    lock, text = load("conda-lock.test-lockfile.conda-lock.yml")
    main = lockfile.plan(lock, text, "linux-64", ["main"])
    both = lockfile.plan(lock, text, "linux-64", ["main", "dev"])
    assert both.count > main.count
    assert "async_generator" in {e.name for e in both.conda}
    assert "async_generator" not in {e.name for e in main.conda}


def test_unified_pip_entries():
    lock, text = load("conda-lock.test-install-with-pip-deps.conda-lock.yml")
    plan = lockfile.plan(lock, text, "linux-64", ["main"])
    names = [p.name for p in plan.pip]
    assert "certifi" in names and all(len(p.sha256) == 64 for p in plan.pip)


def test_explicit_pip_lines_and_sha256_fragments():
    text = (
        "# platform: linux-64\n@EXPLICIT\n"
        "https://x.example/c/linux-64/a-1.0-h0_0.conda#sha256:" + "ab" * 32 + "\n"
        "# pip requests @ https://files.example/requests-2.0-py3-none-any.whl#sha256="
        + "cd" * 32
        + "\n"
    )
    plan = lockfile.plan(lockfile.parse(text), text, "linux-64", ["main"])
    assert plan.conda[0].sha256 == "ab" * 32 and not plan.conda[0].md5
    assert plan.pip[0].name == "requests" and plan.pip[0].sha256 == "cd" * 32


def test_malformed_pip_line_is_an_error_with_the_line_number():
    text = "@EXPLICIT\n# pip requests @ https://files.example/requests.whl\n"
    with pytest.raises(GpuCiError, match="lock-file line 2: pip line without"):
        lockfile.parse(text)


def test_environment_yml_is_refused_with_how_to_lock_it():
    text = "name: ci\nchannels:\n  - conda-forge\ndependencies:\n  - python=3.12\n"
    with pytest.raises(GpuCiError) as info:
        lockfile.parse(text, "environment.yml")
    assert "needs a solver" in info.value.message
    assert "conda-lock lock -f environment.yml -p linux-64" in info.value.message


def test_unknown_text_is_refused():
    with pytest.raises(GpuCiError, match="neither an explicit lock"):
        lockfile.parse("hello\n")


def test_lock_without_hashes_is_refused():
    text = "@EXPLICIT\nhttps://x.example/c/linux-64/a-1.0-h0_0.conda\n"
    with pytest.raises(GpuCiError, match="has no md5 or sha256"):
        lockfile.plan(lockfile.parse(text), text, "linux-64", ["main"])


def test_not_an_archive_url():
    with pytest.raises(GpuCiError, match="does not name a conda archive"):
        lockfile.parse("@EXPLICIT\nhttps://x.example/c/linux-64/readme.txt#" + "0" * 32 + "\n")


def test_credentials_are_masked():
    url = "https://user:s3cret@conda.example.com/t/tok-123/private/linux-64/a-1-h0_0.conda"
    masked = urls.mask_url(url)
    assert "s3cret" not in masked and "tok-123" not in masked and "user" not in masked
    assert sorted(urls.secrets_in(url)) == ["s3cret", "tok-123"]
    assert urls.strip_credentials(url).startswith("https://conda.example.com/")


@pytest.mark.parametrize(
    "url,masked",
    [
        ("https://h.example/t/tok-1/c/a-1-h0_0.conda", "https://h.example/t/***/c/a-1-h0_0.conda"),
        ("https://u:pw@h.example/c/a-1-h0_0.conda", "https://***:***@h.example/c/a-1-h0_0.conda"),
        ("https://h.example:8443/c/a-1-h0_0.conda", "https://h.example:8443/c/a-1-h0_0.conda"),
    ],
)
def test_a_token_or_a_password_alone_is_masked_and_a_plain_url_kept(url, masked):
    assert urls.mask_url(url) == masked
    assert urls.mask_url(f"see {url} twice: {url}") == f"see {masked} twice: {masked}"


def test_render_explicit_roundtrip():
    lock, text = load("conda-lock.test-install-with-pip-deps.conda-lock.yml")
    plan = lockfile.plan(lock, text, "linux-64", ["main"])
    rendered = lockfile.render_explicit(plan)
    again = lockfile.plan(lockfile.parse(rendered), rendered, "linux-64", ["main"])
    assert [e.url for e in again.conda] == [e.url for e in plan.conda]


def test_dry_run_over_a_real_lock_prints_every_package(run_cli):
    path = lock_file("conda-lock.test-install-with-pip-deps.conda-lock.yml")
    result = run_cli(
        [
            "setup-conda-from-lock",
            "--lock-file",
            str(path),
            "--dry-run",
            "true",
            "--platform",
            "linux-aarch64",
        ]
    )
    assert result.returncode == 0, result.stdout
    plan = lockfile.plan(
        lockfile.parse(path.read_text()), path.read_text(), "linux-aarch64", ["main"]
    )
    assert result.outputs["packages"] == str(plan.count)
    assert result.outputs["lock-sha256"] == plan.lock_sha256
    for entry in plan.conda:
        assert f"  {entry.name} {entry.version} {entry.build}" in result.stdout
    assert "prefix" not in result.outputs
    assert "dry run: nothing downloaded" in result.summary


def test_missing_lock_file(run_cli, tmp_path):
    result = run_cli(["setup-conda-from-lock", "--lock-file", str(tmp_path / "nope.yml")])
    assert result.returncode == 1
    assert "does not exist" in result.errors[0]


def test_lock_file_is_required(run_cli):
    result = run_cli(["setup-conda-from-lock"])
    assert result.returncode == 2 and "'lock-file' is required" in result.errors[0]


def test_environment_yml_through_the_cli(run_cli, tmp_path):
    env_yml = tmp_path / "environment.yml"
    env_yml.write_text("dependencies:\n  - numpy\n")
    result = run_cli(["setup-conda-from-lock", "--lock-file", str(env_yml)])
    assert result.returncode == 1 and "needs a solver" in result.errors[0]


def test_the_locks_the_tests_name_are_in_shared():
    """The tests above load these by name; ../shared must hold each (else they skip)."""
    folder = lock_file(".")
    named = {
        "conda-lock.test-multiple-categories.conda-lock.yml",
        "conda-lock.zlib.conda-linux-64.lock",
        "conda-lock.test-install-with-pip-deps.conda-lock.yml",
        "conda-lock.test-explicit-toposorted.conda-lock.yml",
        "setup-micromamba.test.conda-lock.yml",
    }
    assert named <= {p.name for p in folder.iterdir()}


URL_SHAPES = [
    "https://conda.anaconda.org/conda-forge/linux-64/numpy-1.26.4-py311h_0.conda",
    "http://127.0.0.1:8080/c/noarch/tzdata-2024a-h0c530f3_0.conda",
    "https://user:pw@host.example/t/tok/c/linux-64/a-1-h_0.tar.bz2?x=1#frag",
    "https://host.example/c/linux-64/a-1-h_0.conda#sha256:" + "0" * 64,
    "https://host.example/c/linux-64/a-1-h_0.conda?#",
    "https://host.example",
    "https://h/",
    "https://h?q/x",
    "https://h#f/x",
    "file:///srv/c/linux-64/a-1-h_0.conda",
    "file:/srv/c/linux-64/a-1-h_0.conda",
    "c/linux-64/a-1-h_0.conda",
    "/c/a-1-h_0.conda",
    "//h/c/a-1-h_0.conda",
    "1http://h/c/a-1-h_0.conda",
    "ht~tp://h/c/a-1-h_0.conda",
    "HTTPS://H/C/A-1-H_0.conda",
    "s3+x.y-z://b/k/a-1-h_0.conda",
    "https://[::1]:8/c/a-1-h_0.conda",
    "https://[::1/c/a-1-h_0.conda",
    "https://::1]/c/a-1-h_0.conda",
    "https://hé.example/c/a-1-h_0.conda",
    "https://h/ü/a-1-h_0.conda",
    "mailto:a@b",
    "https://h/c//a-1-h_0.conda//",
    "",
    ":",
    "://x/y",
]


@pytest.mark.parametrize("url", URL_SHAPES)
def test_url_path_is_urlsplits(url):
    """The lock parser's shortcut for plain URLs gives ``urlsplit``'s path (or its error)."""
    from urllib.parse import urlsplit

    try:
        want: object = urlsplit(url).path
    except ValueError as exc:
        want = type(exc)
    try:
        got: object = lockfile._url_path(url)
    except ValueError as exc:
        got = type(exc)
    assert got == want


@pytest.mark.parametrize(
    "char",
    [
        " ",
        "\t",
        "\n",
        "\r",
        "\x0b",
        "\x0c",
        "\x00",
        "\x1b",
        "\x1f",
        "\x7f",
        "\x85",
        "\xa0",
        "\u2028",
        "\u3000",
    ],
)
def test_url_with_whitespace_or_control_character_is_refused(char):
    url = f"https://x.example/c/linux-64/a-1.0-h0_0.conda{char}--trusted-host"
    with pytest.raises(GpuCiError, match="contains whitespace or a control character"):
        lockfile.conda_entry(url, md5="0" * 32, where="lock line 2")


def test_secrets_in_plain_urls_are_none():
    assert urls.secrets_in("https://conda.example.com/c/linux-64/a-1-h0_0.conda") == []
    assert urls.secrets_in("https://u:p@conda.example.com/c/a-1-h0_0.conda") == ["p"]
    assert urls.secrets_in("https://conda.example.com/t/tk/c/a-1-h0_0.conda") == ["tk"]


def test_url_urlsplit_refuses_is_a_lock_error():
    with pytest.raises(GpuCiError, match=r"line 2: https://\[::1/c.* is not a valid URL"):
        lockfile.parse("@EXPLICIT\nhttps://[::1/c/linux-64/a-1-h0_0.conda#" + "0" * 32 + "\n")


@pytest.mark.parametrize(
    "netloc",
    ["h:80", "h:0", "h:65535", "h:0080", "u:p@h:443", "u@v@h:8080", "h:", "[::1]:80"]
    + ["h:65536", "h:99999", "h:x", "a:b:80", "u:p@h:x", "h:+80", "h:\u0663", "h:1_0"]
    + ["h:x?@k:80", "h:x#@k:80", "h:" + "9" * 5000],
)
def test_a_port_is_judged_as_urlsplit_judges_it(netloc):
    """The lock's ports skip ``urlsplit`` only where it would accept them (its cost per entry
    is the lock's, at every start): the same URLs parse, and the same are refused."""
    from urllib.parse import urlsplit

    url = f"https://{netloc}/c/linux-64/a-1-h0_0.conda"
    try:
        _ = urlsplit(url).port
        refused = False
    except ValueError:
        refused = True
    line = f"@EXPLICIT\n{url}#{'0' * 32}\n"
    if refused:
        with pytest.raises(GpuCiError, match="is not a valid URL"):
            lockfile.parse(line)
    else:
        assert lockfile.parse(line).packages[0]["entry"].url == url


@pytest.mark.parametrize("path", UNIFIED, ids=lambda p: p.name)
def test_libyaml_and_pure_python_loaders_give_the_same_lock(path):
    """Unified locks parse with libyaml's CSafeLoader where PyYAML has it: the same LockFile
    (and plan) as the pure-Python SafeLoader, for every real lock."""
    import yaml

    if not yaml.__with_libyaml__:
        pytest.skip("PyYAML without libyaml: only SafeLoader exists here")
    assert lockfile.yaml_loader() is yaml.CSafeLoader
    assert lockfile.yaml_loader(libyaml=False) is yaml.SafeLoader
    text = path.read_text()
    fast = lockfile.parse(text, path.name)
    slow = lockfile.parse(text, path.name, loader=yaml.SafeLoader)
    assert fast == slow
    assert fast.packages
    platform = fast.platforms[0]
    assert lockfile.plan(fast, text, platform, ["main"], path.name) == lockfile.plan(
        slow, text, platform, ["main"], path.name
    )


@pytest.mark.parametrize("libyaml", [True, False], ids=["CSafeLoader", "SafeLoader"])
def test_invalid_unified_yaml_names_its_line_with_either_loader(libyaml):
    text = "version: 1\nmetadata:\n  platforms: [linux-64]\npackage:\n  - name: [x\n    bad: 1\n"
    with pytest.raises(GpuCiError, match=r"^conda-lock.yml is not valid YAML \(line 6\)\.$"):
        lockfile.parse(text, "conda-lock.yml", loader=lockfile.yaml_loader(libyaml))


def _laughs(levels: int) -> str:
    """A lock of a few hundred characters whose platform list, aliases expanded, holds
    10**levels scalars (each anchor a list of ten aliases to the one before: "billion laughs")."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "\n".join(
        [*lines, "version: 1", "metadata:", f"  platforms: *a{levels - 1}", "package:", "  []", ""]
    )


@pytest.mark.parametrize("libyaml", [True, False], ids=["CSafeLoader", "SafeLoader"])
def test_aliases_that_expand_past_the_text_are_refused(libyaml):
    """YAML aliases share one object, so loading is cheap, but every str() of it (platforms,
    names, URLs, error messages) writes it out: 401 characters became a 5 MB platform name,
    each further line ×10 (GBs of memory from a 1 kB lock). A lock's data, aliases
    expanded, is refused past a few times the text's size, with either loader."""
    text = _laughs(6)
    with pytest.raises(GpuCiError, match=r"^conda-lock.yml: its YAML aliases .* Re-lock it"):
        lockfile.parse(text, "conda-lock.yml", loader=lockfile.yaml_loader(libyaml))


@pytest.mark.parametrize("libyaml", [True, False], ids=["CSafeLoader", "SafeLoader"])
def test_aliases_that_stay_small_and_cycles_still_parse(libyaml):
    """Only the blow-up is refused: a merge key, a small shared mapping and a list that
    contains itself (SafeLoader builds it) parse as before."""
    text = (
        "base: &b {platform: linux-64, manager: conda}\n"
        "version: 1\nmetadata:\n  platforms: [linux-64]\n  channels: []\n"
        "package:\n  - {<<: *b, name: a}\n  - {<<: *b, name: b}\n"
    )
    lock = lockfile.parse(text, "conda-lock.yml", loader=lockfile.yaml_loader(libyaml))
    assert [p["name"] for p in lock.packages] == ["a", "b"]
    assert lock.packages[1]["platform"] == "linux-64"
    if not libyaml:
        cyclic = text + "extra: &c [*c]\n"
        assert lockfile.parse(cyclic, "conda-lock.yml", loader=lockfile.yaml_loader(False))


@pytest.mark.parametrize("libyaml", [True, False], ids=["CSafeLoader", "SafeLoader"])
def test_yaml_nested_past_the_loaders_depth_is_invalid_yaml_with_either_loader(libyaml):
    """libyaml refuses nesting past 1000 levels (a YAML error naming the line); the pure-Python
    SafeLoader recursed into a RecursionError: an internal error, not a lock error."""
    text = "version: 1\nmetadata:\n  platforms: [linux-64]\npackage:\n  - " + "[" * 1200 + "\n"
    with pytest.raises(GpuCiError, match=r"^conda-lock.yml is not valid YAML \(.*\)\.$"):
        lockfile.parse(text, "conda-lock.yml", loader=lockfile.yaml_loader(libyaml))


def test_a_lock_file_that_is_not_utf8_is_a_lock_error_naming_the_line(tmp_path):
    """conda-lock writes UTF-8; a Latin-1 byte (an editor's or a hostile author's) was a
    UnicodeDecodeError, reported as an internal error."""
    path = tmp_path / "conda-lock.yml"
    path.write_bytes(
        b"version: 1\nmetadata:\n  platforms: [linux-64]\npackage:\n  - name: caf\xe9\n"
    )
    with pytest.raises(
        GpuCiError,
        match=rf"^lock-file {re.escape(str(path))} is not UTF-8 text: byte 0xe9 on line 5 ",
    ):
        pipeline.read_lock(str(path))


@pytest.mark.parametrize(
    "kind, text",
    [
        ("explicit", "@EXPLICIT\nhttps://c.example/c/linux-64/a-1-h0_0.conda#" + "0" * 32),
        ("unified", "package:\n  []\nmetadata:\n  platforms: [linux-64]\n"),
    ],
    ids=["explicit", "unified"],
)
def test_a_lock_file_with_a_utf8_byte_order_mark_reads_as_without(tmp_path, kind, text):
    """A UTF-8 BOM (Windows editors write one) made the first line unrecognised: a unified
    lock starting with package: was 'neither an explicit lock nor a unified conda-lock.yml'."""
    plain, marked = tmp_path / "plain.lock", tmp_path / "marked.lock"
    plain.write_text(text + "\n", encoding="utf-8")
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    assert pipeline.read_lock(str(marked)) == pipeline.read_lock(str(plain))
    assert lockfile.parse(pipeline.read_lock(str(marked))).kind == kind


@pytest.mark.parametrize("char", ["\x00", "\x01", "\x7f", "\ufffe"], ids=ascii)
@pytest.mark.parametrize("libyaml", [True, False], ids=["CSafeLoader", "SafeLoader"])
def test_a_character_yaml_does_not_allow_names_its_line_with_either_loader(libyaml, char):
    """YAML's reader refuses control characters with a position, not a line mark: the error
    named no line. libyaml's position counts UTF-8 bytes (the é before it), SafeLoader's
    characters: the same line either way, with \\r\\n and \\r line ends too."""
    text = "version: 1\r# c\nmetadata:\r\n  platforms: [é]\npackage:\n  - name: a" + char + "b\n"
    with pytest.raises(GpuCiError, match=r"^conda-lock.yml is not valid YAML \(line 6\)\.$"):
        lockfile.parse(text, "conda-lock.yml", loader=lockfile.yaml_loader(libyaml))


_SHAPE_BASE = "version: 1\nmetadata:\n  platforms: [linux-64]\n  channels: []\npackage:\n"
_SHAPE_PKG = (
    "  - {name: a, platform: linux-64, url: 'https://c.example/c/linux-64/a-1-h0_0.conda', "
    "hash: {md5: '00000000000000000000000000000000'}"
)


@pytest.mark.parametrize(
    "text, message",
    [
        (_SHAPE_BASE + "  - 1\n", r"package 1 is not a mapping"),
        (_SHAPE_BASE + _SHAPE_PKG + "}\n  - abc\n", r"package 2 is not a mapping"),
        (
            _SHAPE_BASE + _SHAPE_PKG + ", hash: [x]}\n",
            r"package 1 \(a\): its hash is not a mapping",
        ),
        (
            _SHAPE_BASE + _SHAPE_PKG + ", dependencies: [x]}\n",
            r"package 1 \(a\): its dependencies are not a mapping",
        ),
        (
            "version: 1\nmetadata:\n  - platforms\npackage:\n  []\n",
            r"its metadata is not a mapping",
        ),
        (
            "version: 1\nmetadata:\n  platforms: linux-64\npackage:\n  []\n",
            r"its metadata's platforms are not a list",
        ),
    ],
    ids=["int-package", "str-package", "hash-list", "dependencies-list", "metadata", "platforms"],
)
def test_a_unified_lock_of_the_wrong_shape_is_a_lock_error(text, message):
    """conda-lock's schema, as far as we read it: each package a mapping, its hash and
    dependencies mappings, metadata a mapping with a platforms list. Other shapes were an
    AttributeError (an internal error), or a platform string read letter by letter."""
    with pytest.raises(GpuCiError, match=rf"^conda-lock.yml(: | ){message}.* Re-lock it"):
        lock = lockfile.parse(text, "conda-lock.yml")
        lockfile.plan(lock, text, "linux-64", [], "conda-lock.yml")
