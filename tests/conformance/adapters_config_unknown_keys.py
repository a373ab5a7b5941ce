"""0.3.5's config validation as a JSON-in, JSON-out function for `config_unknown_keys.json`.

`validate(config)` runs `Config.model_validate(config)` with no `NANOBOT_*` variables set;
`validate_with_env(config, env)` sets `env` first (pydantic-settings reads it). Both return
`{"outcome": "accepted"}` or `{"outcome": "refused", "problems": [[dotted path, message], …]}`
sorted by path, with pydantic's own message (`Extra inputs are not permitted`).
"""

import os

from pydantic import ValidationError

from nanobot.config.schema import Config, _resolve_tool_config_refs

_resolve_tool_config_refs()


def _outcome(config: dict) -> dict:
    try:
        Config.model_validate(config)
    except ValidationError as exc:
        problems = sorted(
            [".".join(str(part) for part in err["loc"]), err["msg"]] for err in exc.errors()
        )
        return {"outcome": "refused", "problems": problems}
    return {"outcome": "accepted"}


def validate_with_env(config: dict, env: dict) -> dict:
    saved = dict(os.environ)
    for key in [k for k in os.environ if k.startswith("NANOBOT_")]:
        del os.environ[key]
    os.environ.update(env)
    try:
        return _outcome(config)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def validate(config: dict) -> dict:
    return validate_with_env(config, {})
