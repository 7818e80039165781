"""Who a request is for admission: its tenant, its priority band and its key's limits.

Tenant: the API key's principal name (set by the security layer in `scope["kvgate.principal"]`),
else the operator's `tenant_header`, else the fairness id (`x-llm-d-inference-fairness-id`),
else `"anonymous"`. Band: the principal's tier through `tiers`, else the priority of the
InferenceObjective the request names (`x-llm-d-inference-objective`, when it is a known one:
`routing.admission.objectives`), else the `priority_header` (only when the operator names one:
clients cannot raise their own priority otherwise), else `standard` (the last band if there is
none). The principal is read duck-typed (`name`, `tier`, `requests_per_minute`,
`tokens_per_minute`), so any object with those attributes works.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.control_headers import FAIRNESS_ID, OBJECTIVE, control_header
from gateway.errors import BadRequestError
from routing.admission.objectives import Objectives, band_of
from routing.config.schema import AdmissionSection
from routing.frozen import fast_init

PRINCIPAL_SCOPE_KEY = "kvgate.principal"
ANONYMOUS = "anonymous"
DEFAULT_BAND = "standard"
_MAX_TENANT_CHARS = 128  # a client-chosen header value: keep the queue's keys small


@fast_init
@dataclass(frozen=True, slots=True)
class Identity:
    """A request's tenant and band, and the limits of the key it came with (None: none)."""

    tenant: str
    band: int
    band_name: str
    key: str | None = None
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None


class Identifier:
    """Resolves identities under one `admission:` section."""

    def __init__(self, section: AdmissionSection, objectives: Objectives | None = None) -> None:
        self._section = section
        # Read per request, kept as plain attributes (a pydantic model's `__getattr__` makes
        # every attribute read on it the slower lookup); the section is frozen.
        self._band_names = section.bands
        self._tiers = section.tiers
        self._tenant_header = section.tenant_header
        self._priority_header = section.priority_header
        self._objectives = objectives if objectives is not None else Objectives()
        self._bands = {name.lower(): i for i, name in enumerate(section.bands)}  # header: any case
        self._default = self._bands.get(DEFAULT_BAND, len(section.bands) - 1)

    def identify(self, scope: Mapping[str, Any], headers: Mapping[str, str]) -> Identity:
        principal = scope.get(PRINCIPAL_SCOPE_KEY)
        name = getattr(principal, "name", None)
        keyed = isinstance(name, str) and bool(name) and name != ANONYMOUS
        band = self._band(getattr(principal, "tier", None), headers)
        if keyed:
            assert isinstance(name, str)
            return Identity(
                tenant=name,
                band=band,
                band_name=self._band_names[band],
                key=name,
                requests_per_minute=_limit(getattr(principal, "requests_per_minute", None)),
                tokens_per_minute=_limit(getattr(principal, "tokens_per_minute", None)),
            )
        tenant = header_tenant(headers, self._tenant_header) or ANONYMOUS
        return Identity(tenant, band, self._band_names[band])

    def priority(self, headers: Mapping[str, str]) -> int:
        """The priority of the known InferenceObjective the request names, else 0."""
        priority = self._objectives.priority(control_header(headers, OBJECTIVE))
        return 0 if priority is None else priority

    def _band(self, tier: object, headers: Mapping[str, str]) -> int:
        if isinstance(tier, str) and tier in self._tiers:
            return self._bands[self._tiers[tier].lower()]
        priority = self._objectives.priority(control_header(headers, OBJECTIVE))
        if priority is not None:
            return band_of(priority, len(self._section.bands), self._default)
        header = self._priority_header
        asked = headers.get(header) if header else None
        if not asked:
            return self._default
        band = self._bands.get(asked.strip().lower())
        if band is None:
            known = ", ".join(self._section.bands)
            raise BadRequestError(
                f"unknown priority in header {header} (known: {known})", code="unknown_priority"
            )
        return band


def header_tenant(headers: Mapping[str, str], header: str | None) -> str | None:
    """The tenant a request names in the operator's `tenant_header`, else in its fairness id
    (None: neither sent), cut to 128 characters: a client chose it."""
    tenant = (headers.get(header) if header else None) or control_header(headers, FAIRNESS_ID)
    return tenant[:_MAX_TENANT_CHARS] if tenant else None


def _limit(value: object) -> int | None:
    return value if isinstance(value, int) and value > 0 else None
