"""Train muactl's `tiny` model with TRL's OpenEnv integration against `muactl serve openenv`.

TRL's GRPOTrainer drives environments through `environment_factory`: a class whose public methods are
the model's tools and whose `reset()` opens an episode. Here each instance holds one OpenEnv session
(OpenEnv's own GenericEnvClient over WebSocket) on the muactl server: every domain tool becomes a
method that sends one tool call as a step, `send_message` sends text to the simulated user and returns
the reply, and the reward is the server's (1 only if the task is really done). When the model stops
calling tools, its last text goes to the user as the final turn, so the episode can end normally.

    muactl serve openenv bank --tasks template:all --db random --port 8000 &
    python examples/openenv_trl.py --domain bank --url http://127.0.0.1:8000 --steps 3

`tiny` has random weights, so this shows the plumbing (rollouts, rewards, GRPO updates), not learning.
Use a real checkpoint with --model for that; any model whose chat template TRL can parse tool calls from.
"""

from __future__ import annotations

import argparse
import inspect
import os

JSON_TYPES = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list, "object": dict}


def session_class(url: str, tools: list[dict], policy: str):
    """A TRL environment class for the server at `url`, with one method per tool schema."""
    from openenv.core import GenericEnvClient

    class MuactlSession:
        def __init__(self):
            self.client = GenericEnvClient(base_url=url, message_timeout_s=600).sync()
            self.client.connect()
            self.reward, self.done, self.breakdown = 0.0, False, {}

        def reset(self, **kwargs) -> str:
            result = self.client.reset()
            self.reward, self.done, self.breakdown = 0.0, False, {}
            opening = result.observation["messages"]
            return "\n".join(m["content"] for m in opening if m["role"] == "user")

        def _step(self, action: dict) -> str:
            if self.done:
                raise ValueError("The conversation is over.")
            result = self.client.step(action)
            obs = result.observation
            if result.done:
                self.done, self.reward, self.breakdown = True, float(result.reward or 0.0), obs["breakdown"]
            return "\n".join(m["content"] for m in obs["messages"]) or "(no reply)"

        def send_message(self, message: str) -> str:
            """
            Send a message to the customer and wait for their reply.

            Args:
                message: What to tell or ask the customer.

            Returns:
                The customer's reply.
            """
            return self._step({"message": message})

        def _finish(self, last_text: str) -> float:
            """The model's closing text goes to the user (who may end the conversation); the reward."""
            if not self.done and last_text.strip():
                self._step({"message": last_text})
            return self.reward

    for schema in tools:
        setattr(MuactlSession, schema["function"]["name"], _tool_method(schema))
    MuactlSession.policy = policy
    return MuactlSession


def _tool_method(schema: dict):
    """A method with the signature, type hints and Google docstring TRL builds the tool schema from."""
    f = schema["function"]
    props = (f.get("parameters") or {}).get("properties") or {}
    required = set((f.get("parameters") or {}).get("required") or [])
    name = f["name"]

    def call(self, **arguments):
        return self._step({"tool_calls": [{"name": name, "arguments": arguments}]})

    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    hints = {}
    for p in sorted(props, key=lambda p: p not in required):
        hints[p] = JSON_TYPES.get(props[p].get("type"), str)
        default = inspect.Parameter.empty if p in required else None
        params.append(inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default, annotation=hints[p]))
    call.__name__ = call.__qualname__ = name
    call.__signature__ = inspect.Signature(params, return_annotation=str)
    call.__annotations__ = {**hints, "return": str}
    args = "\n".join(f"    {p}: {props[p].get('description') or p}" for p in props)
    call.__doc__ = f"{f.get('description') or name}\n\nArgs:\n{args}\n\nReturns:\n    The tool's result." if props else \
        f"{f.get('description') or name}\n\nReturns:\n    The tool's result."
    return call


def reward_from_muactl(environments, completions, **kwargs) -> list[float]:
    """The server's reward, after the model's closing text reached the user."""
    out = []
    for env, completion in zip(environments, completions):
        last = completion[-1]["content"] if isinstance(completion, list) and completion else str(completion)
        out.append(env._finish(last if isinstance(last, str) else ""))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--domain", default="bank", help="The served domain (to build `tiny` from its text).")
    ap.add_argument("--model", default="tiny", help="tiny, smollm2-135m or a checkpoint folder.")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", default="runs/openenv-trl")
    args = ap.parse_args()
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

    from datasets import Dataset
    from openenv.core import GenericEnvClient
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen3_template

    from muactl.models.folder import load_tokenizer
    from muactl.models.registry import resolve
    from muactl.domain.open import open_domain

    # what the server's agent sees first: the policy (system prompt) and the tool schemas
    with GenericEnvClient(base_url=args.url).sync() as probe:
        opening = probe.reset().observation
    policy = next(m["content"] for m in opening["messages"] if m["role"] == "system")
    env_class = session_class(args.url, opening["tools"], policy)

    path = resolve(args.model, open_domain(args.domain, with_tasks=False).compiled)
    tokenizer = load_tokenizer(path)
    tokenizer.padding_side = "left"
    if getattr(tokenizer, "response_template", None) is None:  # muactl's ChatML writes Qwen's <tool_call>s
        tokenizer.response_template = qwen3_template
    # TRL appends reset()'s text (the customer's first message) to the last user message
    dataset = Dataset.from_dict({"prompt": [[{"role": "system", "content": policy}, {"role": "user", "content": ""}]] * 64})
    config = GRPOConfig(output_dir=args.out, max_steps=args.steps, per_device_train_batch_size=2, num_generations=2,
                        max_completion_length=256, max_tool_calling_iterations=6, temperature=1.0, learning_rate=1e-4,
                        logging_steps=1, report_to=[], use_cpu=True, save_strategy="no", log_completions=False)
    trainer = GRPOTrainer(model=str(path), processing_class=tokenizer, reward_funcs=reward_from_muactl, args=config,
                          train_dataset=dataset, environment_factory=env_class)
    trainer.train()
    for row in trainer.state.log_history:
        if "reward" in row:
            print(f"step {row.get('step')}: reward {row['reward']:.3f}, completion length {row.get('completions/mean_length', 0):.0f}")


if __name__ == "__main__":
    main()
