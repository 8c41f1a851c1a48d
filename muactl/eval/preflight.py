"""Checks made before any episode runs. What would fail every episode the same way (an API key that is not
set, an `--api-base` nobody answers on, a model folder that does not exist) is a user error up front, with
the reason and the fix, instead of a run of `infra_error` episodes whose cause is only in runs.sqlite.

Nothing here calls a model: a key's validity is only known from the provider's answer, so a wrong key
still shows up as infra errors (with their reason in the run's summary).
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request

from ..errors import UsageError

PROBE_TIMEOUT_S = 5.0


def check_backend(spec: str | None, api_base: str | None, option: str) -> None:
    """Check one `--agent`/`--user`/`--tool-model` value. `option` names it in the message."""
    if not spec or spec in ("oracle", "oracle:varied", "scripted", "scripted:varied"):
        return
    if spec.startswith("adversary:") and option == "--agent":  # built in, like the oracle: no provider to ask
        check_adversary(spec)
        return
    if spec.startswith(("hf:", "vllm:")):
        check_local_model(spec.split(":", 1)[1], f"{option} {spec}")
    else:
        check_litellm(spec, api_base, f"{option} {spec}")


def check_adversary(spec: str) -> None:
    from ..episode.agents.adversarial import ADVERSARIES

    if spec.removeprefix("adversary:") not in ADVERSARIES:
        raise UsageError(f"--agent {spec}: unknown adversary '{spec.removeprefix('adversary:')}' "
                         f"(one of: {', '.join(ADVERSARIES)})")


def check_local_model(ref: str, label: str) -> None:
    """A checkpoint folder must exist and hold a model; built-in names and hub ids resolve when loaded."""
    if ref in ("tiny", "smollm2-135m", "smollm2"):
        return
    from ..errors import ModelError
    from ..models.registry import resolve

    try:
        resolve(ref)
    except ModelError as e:
        raise UsageError(f"{label}: {e}") from None


def check_litellm(model: str, api_base: str | None, label: str) -> None:
    from ..models.llm import litellm

    lt = litellm()
    try:
        provider = lt.get_llm_provider(model=model, api_base=api_base)[1]
    except Exception as e:  # litellm raises its BadRequestError for a provider it does not know
        raise UsageError(f"{label}: litellm cannot tell which provider serves '{model}' ({str(e).splitlines()[0][:160]}); "
                         f"write provider/model, e.g. openai/gpt-4o-mini, or hosted_vllm/NAME with --api-base") from None
    if api_base:
        probe(api_base, label)
        return  # a local server: muactl sends a placeholder key when none is set
    if provider == "hosted_vllm" and not os.environ.get("HOSTED_VLLM_API_BASE"):
        raise UsageError(f"{label}: a hosted_vllm model needs the server's address: pass --api-base "
                         f"http://HOST:PORT/v1 (or set HOSTED_VLLM_API_BASE)")
    missing = [k for k in lt.validate_environment(model=model).get("missing_keys") or []
               if not k.endswith("_API_BASE")]  # providers with a default address (ollama) run without it
    if missing:
        raise UsageError(f"{label}: {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set; "
                         f"export {missing[0]}=..., or point --api-base at an OpenAI-compatible server")


def probe(api_base: str, label: str) -> None:
    """Any HTTP answer (even 401 or 404) means a server is there; no answer within a few seconds is an error."""
    url = api_base.rstrip("/") + "/models"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="GET"), timeout=PROBE_TIMEOUT_S):
            return
    except urllib.error.HTTPError:
        return
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", None) or e
        raise UsageError(f"{label}: nothing answers at --api-base {api_base} ({reason}); start the server "
                         f"or fix the address (e.g. http://127.0.0.1:8000/v1)") from None


def check_episode_parts(agent: str, user: str, api_base: str | None, user_api_base: str | None,
                        tool_model: str | None = None) -> None:
    """Everything an eval, synth or chat will call, checked before its first episode."""
    check_backend(agent, api_base, "--agent")
    check_backend(user, user_api_base, "--user")
    if tool_model:
        check_backend(tool_model, api_base, "--tool-model")
