"""The organisation's billing usage report, for the month's GPU spend."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from gpu_ci.errors import GpuCiError
from gpu_ci.github.client import ApiError, Rest
from gpu_ci.github.spend import budget


def billing_items(rest: Rest, org: str, month: budget.Month) -> list[dict[str, Any]]:
    """The organisation's billing usage report for the month (enhanced billing platform)."""
    answer = rest.get(
        f"/organizations/{quote(org, safe='')}/settings/billing/usage"
        f"?year={month.year}&month={month.month}"
    )
    items = answer.get("usageItems")
    if not isinstance(items, list):
        raise GpuCiError("the billing usage API answered without usageItems.")
    return items


def billing_error(status: int, org: str) -> str:
    """What a 403/404 from the billing usage API means, and the fix."""
    if status == 404:
        return (
            f"the billing usage API has no organization report for '{org}' (it exists "
            "for organizations only): '{org}' is a personal account (whose report is "
            "/users/{org}/settings/billing/usage, which gpu-spend does not read), or the "
            "token cannot see the organization. "
            "Use an organization's billing-token, or leave billing-token empty to count "
            "the workflow's runs."
        ).replace("{org}", org)
    return (
        f"the billing-token may not read the billing of '{org}': it must belong to an "
        "administrator of the organization and, as a fine-grained token, have the "
        "organization permission 'Administration: read'. Leave billing-token empty to "
        "count the workflow's runs with actions: read instead."
    )


class BillingAccessError(GpuCiError):
    """The billing report cannot be read with this token.

    The billing usage API refused the billing-token (403) or has no such report (404):
    a configuration to fix, not an outage to ride out."""


def billing_spend(
    billing_rest: Rest, repo: str, month: budget.Month, skus: Sequence[str], per_repository: bool
) -> budget.Spend:
    org = repo.split("/")[0]
    try:
        items = billing_items(billing_rest, org, month)
    except ApiError as exc:
        if exc.status in (403, 404):
            raise BillingAccessError(
                billing_error(exc.status, org), title="billing usage API"
            ) from None
        raise
    return budget.billing_spend(items, skus, repo if per_repository else None, month)
