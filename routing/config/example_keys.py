"""Keys that kvgate's own files and docs once showed as examples, and the placeholders its
manifests ship (deploy/kubernetes/frontdoor's admin key): anyone can send them.

A config (`security.api_keys`, `security.admin_key_sha256`, an `api_keys_file`) or variable
(`KVGATE_API_KEYS`, `KVGATE_ADMIN_KEY`) holding one of them is refused, as any invalid field
is, so a copied example or an unfilled placeholder never becomes a working credential.
"""

from __future__ import annotations

# hex SHA-256 -> the example key it is the digest of
EXAMPLE_KEYS = {
    "c940f8ab676f2428dd7bc347e18d3ef916b44e91244863a1ca555141b3b25048": "kvgate-example-admin-key",
    "337b481b4ae47fa56e5630fce397be6f66103d78a45a04d3532f63f1060e0571": "kvgate-example-key",
    "0006239b48071f3ffa45900549765fef87c339a6f06c9ef58987ef9619d56578": (
        "REPLACE-with-a-random-admin-key"
    ),
}


def check_not_example(sha256: str) -> str:
    """`sha256` unless it is the digest of a documented example key; ValueError says which."""
    example = EXAMPLE_KEYS.get(sha256.lower())
    if example is not None:
        raise ValueError(
            f"is the documented example key {example!r} (SHA-256 {sha256.lower()[:16]}...), "
            'which anyone can send: use a key of your own (printf %s "$KEY" | kvgate hash-key)'
        )
    return sha256
