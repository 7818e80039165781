"""`--backend URL,...` as a `backends:` entry of the config file."""

from __future__ import annotations

from pydantic import ValidationError

from routing.config.schema import BackendEntry, ConfigError, format_validation_error


def parse_backend_arg(arg: str) -> BackendEntry:
    """Parse `--backend URL[,engine=vllm][,models=a|b][,id=name][,kv_events=ENDPOINT]
    [,kv_replay=ENDPOINT]` (the engine's KV-event publisher and replay socket)."""
    url, *opts = arg.split(",")
    fields: dict[str, object] = {"url": url}
    events: dict[str, str] = {}
    for opt in opts:
        key, sep, value = opt.partition("=")
        if key in {"kv_events", "kv_replay"} and sep:
            events["endpoint" if key == "kv_events" else "replay"] = value
            continue
        if not sep or key not in {"engine", "models", "id"}:
            raise ConfigError(
                f"--backend {arg!r}: expected key=value with key "
                "engine|models|id|kv_events|kv_replay"
            )
        fields[key] = [m for m in value.split("|") if m] if key == "models" else value
    if events:
        fields["kv_events"] = events
    try:
        return BackendEntry.model_validate(fields)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, f"--backend {arg!r}")) from None
