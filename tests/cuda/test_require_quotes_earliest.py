"""``require``: quoted values (a GPU name with spaces) and ``driver=earliest``."""

from __future__ import annotations

import json

import pytest

from gpu_ci.cuda import require as require_spec
from gpu_ci.cuda.facts import Gpu
from gpu_ci.cuda.verify.table import driver_branch, load_table
from gpu_ci.errors import UsageError
from testkit.cuda_env import (
    build_fake_nvml,
    conda_cuda_env,
    gpu_config,
    nvml_config,
    torch_target,
    write_config,
)

RTX_PRO = Gpu(
    0,
    "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    "GPU-pppp",
    (12, 0),
    97887 * 2**20,
    brand="nvidiartx",
)


def facts(*gpus: Gpu, driver: str = "580.95.05", job_cuda: str = "", earliest: str = ""):
    return require_spec.Facts(
        cuda="13.0", driver=driver, gpus=gpus, job_cuda=job_cuda, earliest_driver=earliest
    )


def holds(line: str, f: require_spec.Facts) -> bool:
    return require_spec.unmet(require_spec.parse_requirement(line), f) is None


# -- quoted values -----------------------------------------------------------------------------


def test_a_quoted_name_keeps_its_spaces():
    req = require_spec.parse_requirement('name="RTX PRO 6000"')
    assert req.alternatives == ((require_spec.Condition("name", "=", "RTX PRO 6000"),),)
    assert str(req.alternatives[0][0]) == 'name="RTX PRO 6000"'
    assert holds('name="RTX PRO 6000"', facts(RTX_PRO))
    assert holds("name='rtx pro 6000',memory>=90GiB", facts(RTX_PRO))


def test_space_still_separates_alternatives_outside_quotes():
    req = require_spec.parse_requirement('name="RTX PRO 6000" name=H100,gpu-count>=8')
    assert [[str(c) for c in alt] for alt in req.alternatives] == [
        ['name="RTX PRO 6000"'],
        ["name=H100", "gpu-count>=8"],
    ]
    assert holds('name="RTX PRO 6000" name=H100,gpu-count>=8', facts(RTX_PRO))
    # unquoted, "PRO" and "6000" would be alternatives of their own and unreadable
    with pytest.raises(UsageError, match="cannot read 'PRO'"):
        require_spec.parse_requirement("name=RTX PRO 6000")


def test_a_comma_inside_quotes_is_part_of_the_value():
    req = require_spec.parse_requirement('name="A, B",driver>=550')
    assert [str(c) for c in req.alternatives[0]] == ['name="A, B"', "driver>=550"]


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ('name="RTX PRO 6000', r'require: the quote " at column 6 .* is never closed: close it'),
        ("cuda>=12.4 name='RTX PRO", r"the quote ' at column 17"),
        ('name=RTX" PRO"', "quotes must enclose the whole value"),
        ('name=""', "empty quoted value"),
        ('"name=H100"', "cannot read"),
    ],
)
def test_bad_quotes_are_usage_errors_saying_what_and_where(line, match):
    with pytest.raises(UsageError, match=match):
        require_spec.parse_requirement(line)


# -- driver=earliest ---------------------------------------------------------------------------


def test_earliest_is_the_branch_of_the_job_cudas_minimum_driver():
    floor = load_table().min_driver(12)
    assert floor is not None
    on_floor = facts(RTX_PRO, driver="525.147.05", job_cuda="12.9", earliest=floor)
    assert holds("driver=earliest", on_floor)
    newer = facts(RTX_PRO, driver="535.104.05", job_cuda="12.9", earliest=floor)
    (cond,) = require_spec.unmet(require_spec.parse_requirement("driver=earliest"), newer) or []
    assert require_spec.explain(cond, newer) == (
        f"driver=earliest (CUDA 12.9's earliest driver branch is R{driver_branch(floor)}, its "
        f"minimum driver {floor}; driver 535.104.05 is on R535)"
    )


def test_earliest_without_a_job_cuda_never_holds_and_says_why():
    f = facts(RTX_PRO)
    (cond,) = require_spec.unmet(require_spec.parse_requirement("driver=earliest"), f) or []
    assert "no CUDA was found in the job" in require_spec.explain(cond, f)


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ("driver>=earliest", "earliest takes only ="),
        ("driver!=earliest", "earliest takes only ="),
        ("driver=oldest", r"unreadable value 'oldest' \(or earliest\)"),
        ("cuda=earliest", "unreadable value 'earliest'"),
    ],
)
def test_bad_earliest_is_a_usage_error(line, match):
    with pytest.raises(UsageError, match=match):
        require_spec.parse_lines([line])


# -- through the action ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fake_nvml_dir(tmp_path_factory):
    return build_fake_nvml(tmp_path_factory.mktemp("fake-nvml"))


def run_verify(run_cli, tmp_path, nvml_dir, require, config, python):
    env = {
        "PATH": "/usr/bin:/bin",
        "LD_LIBRARY_PATH": str(nvml_dir),
        "FAKE_NVML_CONFIG": str(write_config(tmp_path / "nvml.cfg", config)),
        "INPUT_PYTHON": str(python),
        "INPUT_REQUIRE": require,
    }
    result = run_cli(["verify-cuda-env"], env)
    result.findings = json.loads(result.outputs.get("findings", "[]"))
    return result


def test_earliest_leg_of_a_cuda_12_9_env(run_cli, tmp_path, fake_nvml_dir):
    python = conda_cuda_env(tmp_path / "env", "12.9")
    t4 = gpu_config(0, name="Tesla T4", cc="7.5", memory_mib=15360, brand=2)
    on_535 = nvml_config(t4, driver="535.104.05", cuda=12020)
    result = run_verify(run_cli, tmp_path, fake_nvml_dir, "driver=earliest", on_535, python)
    assert result.returncode == 1
    (unmet,) = [f for f in result.findings if f["code"] == "require-unmet"]
    assert "CUDA 12.9's earliest driver branch is R525" in unmet["message"]
    assert "driver 535.104.05 is on R535" in unmet["message"]
    on_525 = nvml_config(t4, driver="525.147.05", cuda=12000)
    result = run_verify(run_cli, tmp_path, fake_nvml_dir, "driver=earliest", on_525, python)
    assert [f["code"] for f in result.findings] == ["minor-version-compatibility"]


def test_a_gpu_named_with_spaces_and_earliest_through_the_action(run_cli, tmp_path, fake_nvml_dir):
    python = torch_target(tmp_path / "env", "2.11.0+cu130", "13.0")
    rtx_pro = gpu_config(
        0, name="NVIDIA RTX PRO 6000 Blackwell Server Edition", cc="12.0", memory_mib=97887
    )
    config = nvml_config(rtx_pro, driver="580.95.05", cuda=13000)
    lines = 'name="RTX PRO 6000",driver=earliest\nname="RTX PRO 6000" name=H100'
    result = run_verify(run_cli, tmp_path, fake_nvml_dir, lines, config, python)
    assert result.returncode == 0, result.stdout
    assert result.findings == []
    bad = run_verify(run_cli, tmp_path, fake_nvml_dir, 'name="RTX PRO', config, python)
    assert bad.returncode == 2
    assert 'require line 1: the quote " at column 6' in bad.stdout
