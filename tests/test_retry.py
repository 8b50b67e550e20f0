"""One retry policy, read once from the environment; a typo is a usage error, not a crash."""

from __future__ import annotations

import pytest

from gpu_ci.errors import UsageError
from gpu_ci.retry import RetryPolicy


def test_defaults_are_one_backoff_for_every_client():
    policy = RetryPolicy.from_environ({})
    assert (policy.attempts, policy.retries, policy.backoff) == (5, 4, 1.0)
    assert [policy.wait(n) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]


def test_environment_overrides_and_caps():
    policy = RetryPolicy.from_environ(
        {
            "GPU_CI_HTTP_RETRIES": "2",
            "GPU_CI_HTTP_BACKOFF": "3",
            "GPU_CI_HTTP_MAX_WAIT": "5",
            "GPU_CI_HTTP_TIMEOUT": "9",
        }
    )
    assert (policy.attempts, policy.timeout) == (3, 9.0)
    assert [policy.wait(n) for n in (1, 2, 3)] == [3.0, 5.0, 5.0]
    assert policy.wait(1, retry_after=60) == 5.0  # Retry-After is capped too
    assert policy.wait(1, retry_after=0) == 0.0


def test_defaults_of_a_client_survive_what_the_environment_leaves_unset():
    api = RetryPolicy(timeout=15.0, max_wait=120.0)
    policy = RetryPolicy.from_environ({"GPU_CI_HTTP_RETRIES": "0"}, api)
    assert (policy.attempts, policy.timeout, policy.max_wait) == (1, 15.0, 120.0)


@pytest.mark.parametrize(
    "name,value,wanted",
    [
        ("GPU_CI_HTTP_RETRIES", "3x", "is not a whole number"),
        ("GPU_CI_HTTP_RETRIES", "2.5", "is not a whole number"),
        ("GPU_CI_HTTP_RETRIES", "-1", "is not a whole number"),
        ("GPU_CI_HTTP_BACKOFF", "fast", "is not a number of seconds"),
        ("GPU_CI_HTTP_BACKOFF", "nan", "is not a number of seconds"),
        ("GPU_CI_HTTP_MAX_WAIT", "-3", "is not a number of seconds"),
    ],
)
def test_a_typo_names_the_variable(name, value, wanted):
    with pytest.raises(UsageError, match=f"{name}='{value}' {wanted}"):
        RetryPolicy.from_environ({name: value})


def test_a_policy_with_no_attempt_is_refused():
    with pytest.raises(UsageError, match="at least 1"):
        RetryPolicy(attempts=0)


def test_the_api_client_reads_the_same_validated_policy():
    # One policy (issue 19): a typo in GPU_CI_HTTP_* is the same usage error for the GitHub
    # client as for downloads, not an internal error, and the backoff default is shared.
    from gpu_ci.errors import UsageError
    from gpu_ci.github.client import ClientSettings
    from gpu_ci.retry import RetryPolicy

    settings = ClientSettings.from_environ({"GPU_CI_HTTP_RETRIES": "2"})
    assert (settings.retries, settings.backoff) == (2, RetryPolicy().backoff)
    with pytest.raises(UsageError, match="GPU_CI_HTTP_TIMEOUT"):
        ClientSettings.from_environ({"GPU_CI_HTTP_TIMEOUT": "soon"})
