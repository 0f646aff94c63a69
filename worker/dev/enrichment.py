"""What the example app's joins read and must write: profiles that change over time,
merchant reference data, and the enriched payment each payment must become.

A profile is valid from its record's timestamp on (the versioned table's reading): an
account whose spending changes gets a second profile, valid from the time of the payment
from which it pays the new way (``ProfileChange``), and the enrichment of each payment
must carry the profile of its own time, not the latest one. Merchants have reference
data, all but the last one: a payment there joins None (a left join's miss).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from worker.examples import payments as app

if TYPE_CHECKING:
    from worker.dev.sample_data import Account

MERCHANTS = 20  # payments go to merchant-00 .. merchant-19
CATEGORIES = ("grocery", "fuel", "travel", "electronics", "restaurants")
COUNTRIES = ("NL", "DE", "FR", "BE")
SPENDING_CHANGE = 3.0  # a changing account's mean and spread, times this


@dataclass(frozen=True, slots=True)
class ProfileChange:
    """An account paying ``mean``/``std`` from payment number ``from_n`` on."""

    from_n: int
    mean: float
    std: float


def changing(
    accts: list[Account], how_many: int, first: int, every: int
) -> dict[str, ProfileChange]:
    """``how_many`` accounts, spread over ``accts`` away from those of ``going_quiet`` and
    ``bursting``, whose spending grows ``SPENDING_CHANGE`` times: the j-th from payment
    number ``first + j * every`` on (for ``payments(changes=)``)."""
    step = max(1, len(accts) // max(1, how_many))
    picked = [accts[(j * step + step // 4) % len(accts)] for j in range(min(how_many, len(accts)))]
    return {
        acct.id: ProfileChange(
            first + j * every,
            round(acct.mean * SPENDING_CHANGE, 2),
            round(acct.std * SPENDING_CHANGE, 2),
        )
        for j, acct in enumerate(picked)
    }


def profile(mean: float, std: float, history: int = 50) -> dict[str, Any]:
    """An ``account-profiles`` value."""
    return {"mean": mean, "std": std, "n": history}


@dataclass(frozen=True, slots=True)
class ProfileHistory:
    """Each account's profiles, ``(valid from ms, profile)`` in time order."""

    versions: Mapping[str, list[tuple[int, dict[str, Any]]]]

    @classmethod
    def of(
        cls,
        accts: Iterable[Account],
        from_ms: int,
        changes: Mapping[str, ProfileChange] | None = None,
        at_n: Callable[[int], int] = lambda n: n,
    ) -> ProfileHistory:
        """Every account's profile from ``from_ms``, and a changing account's second one
        from the time of its change's payment (``at_n(n)``: payment ``n``'s time)."""
        versions: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        for acct in accts:
            versions[acct.id] = [(from_ms, profile(acct.mean, acct.std))]
            change = (changes or {}).get(acct.id)
            if change is not None:
                versions[acct.id].append((at_n(change.from_n), profile(change.mean, change.std)))
        return cls(versions)

    def at(self, account: str, at_ms: int) -> dict[str, Any] | None:
        """The profile valid at ``at_ms``: the latest from at or before it."""
        found = None
        for valid_from, value in self.versions.get(account, ()):
            if valid_from <= at_ms:
                found = value
        return found

    def latest(self) -> dict[str, dict[str, Any]]:
        return {account: versions[-1][1] for account, versions in self.versions.items()}

    def records(self) -> tuple[list[tuple[str, dict[str, Any]]], list[int]]:
        """The ``account-profiles`` records and their timestamps."""
        records, stamps = [], []
        for account, versions in self.versions.items():
            for valid_from, value in versions:
                records.append((account, value))
                stamps.append(valid_from)
        return records, stamps


def merchant_reference() -> dict[str, dict[str, Any]]:
    """The ``merchant-reference`` records: every merchant's but the last one's."""
    return {
        f"merchant-{i:02d}": {
            "name": f"Merchant {i:02d}",
            "category": CATEGORIES[i % len(CATEGORIES)],
            "country": COUNTRIES[i % len(COUNTRIES)],
        }
        for i in range(MERCHANTS - 1)
    }


def expected_enriched(
    account: str,
    payment: dict[str, Any],
    at_ms: int,
    profiles: ProfileHistory,
    merchants: Mapping[str, dict[str, Any]],
) -> dict[str, Any]:
    """The ``enriched-payments`` value a payment made at ``at_ms`` must become."""
    with_profile = app.with_profile(payment, profiles.at(account, at_ms))
    return app.with_merchant(with_profile, merchants.get(payment.get("merchant", "")))


def wrong_enrichments(
    want: Mapping[str, dict[str, Any]], got: Mapping[str, dict[str, Any]]
) -> dict[str, list[str]]:
    """The payment ids whose enrichment is missing, extra, or carries another profile or
    other merchant data than the reference's."""
    profile_wrong, merchant_wrong, other = [], [], []
    for pid in sorted(set(want) & set(got)):
        w, g = want[pid], got[pid]
        if w.get("profile") != g.get("profile"):
            profile_wrong.append(pid)
        if w.get("merchant") != g.get("merchant"):
            merchant_wrong.append(pid)
        if w.get("payment") != g.get("payment"):
            other.append(pid)
    return {
        "missing": sorted(set(want) - set(got)),
        "extra": sorted(set(got) - set(want)),
        "wrong profile": profile_wrong,
        "wrong merchant": merchant_wrong,
        "wrong payment": other,
    }
