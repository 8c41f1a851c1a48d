"""The settings of `muactl synth` (SynthConfig: eval's, with a teacher and an output), light to import: the CLI
builds its options from them at start. Each field also names its key in a train recipe's synth stage."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..eval.config import EvalConfig
from ..limits import MAX_CONCURRENCY, MAX_INSTANCES, MAX_TRIALS
from ..options import option

TASKS = "Split (train | test | all), comma-separated task ids, or template:<id>|all (fresh instances from the domain's templates)."


@dataclass
class SynthConfig(EvalConfig):
    agent: str = option("oracle", "--agent", help="Teacher: oracle | oracle:varied (several phrasings) | hf:<model> | a litellm model id.",
                        recipe="synth.agent")
    # both set by --tasks (synth.tasks in a recipe): a split name, or task ids / template:<id>|all
    split: str | None = option("train", "--tasks", own=True, recipe="synth.tasks")
    tasks: list[str] = option(None, "--tasks", default_factory=list, own=True, recipe="synth.tasks")
    n: int = option(100, "--n", min=1, max=MAX_INSTANCES, help="With --tasks template:...: how many instances.", recipe="synth.n")
    db: str = option("fixed", "--db", help="With --tasks template:...: fixed | random (a fresh database each).",
                     recipe="synth.db")
    contrast: bool = option(False, "--contrast", help="With --tasks template:...: each instance of a template that "
                            "declares a `contrast` comes with its partner on the same database (bank: the same "
                            "customer and accounts, the other right action): pairs that differ only where the "
                            "decision does. --n counts both halves.", recipe="synth.contrast")
    trials: int = option(8, "--trials", min=1, max=MAX_TRIALS, help="Episodes per task; only reward-1 ones are kept.",
                         recipe="synth.trials")
    concurrency: int = option(8, "--concurrency", min=1, max=MAX_CONCURRENCY, recipe="synth.concurrency")
    seed: int = option(0, "--seed", recipe="seed")
    max_turns: int = option(24, "--max-turns", min=1, recipe="synth.max_turns")
    api_base: str | None = option(None, "--api-base", help="OpenAI-compatible server for the teacher.",
                                  recipe="synth.api_base")
    temperature: float = option(0.0, "--temperature", help="Teacher temperature (use > 0 with trials > 1).",
                                not_in_recipe="a recipe's teacher decodes greedily")
    user_temperature: float = option(0.0, "--user-temperature", recipe="user.temperature")
    max_new_tokens: int = option(256, "--max-new-tokens", help="Tokens per teacher turn (local models).",
                                 not_in_recipe="model.max_new_tokens is the trained model's; a local teacher gets "
                                 "the command's default")
    thinking: bool = option(False, "--thinking", help="A local teacher thinks before replying (its "
                            "template's enable_thinking); SFT data keeps only the visible turns.",
                            not_in_recipe="model.thinking is the trained model's; a local teacher gets the command's default")
    tool_model: str | None = option(None, "--tool-model", help="litellm model for simulated tools.",
                                    recipe="synth.tool_model")
    output: str | None = option(None, "-o", "--output", cli_type=Path, help="JSONL to write (default runs/<id>/sft.jsonl).",
                                recipe="synth.output")
    tools: str = option("real", "--tools", help="real (the sandbox) | simulated (an LLM plays every SQL tool; the real "
                        "database keeps score).", recipe="synth.tools")
