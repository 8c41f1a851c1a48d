"""A run over several domains (a recipe's `domains:`): one policy, trained on a mix.

Each domain of the run is a `Part`: its name, its share of the mix (its weight over the sum of the weights) and
its own view of the recipe, the composed config with `domain` set to it and `tasks`, `synth.tasks`, `db` and the
user replaced by what its entry sets. The stages run a part's view as they run a one-domain recipe (synth, eval,
the held-out set), so a domain of a mix means what it means alone; GRPO draws each group's domain by the shares
(grpo.py), and the SFT data is the largest mix of the kept rows whose shares are the weights (`mix_rows`).
A recipe with `domain:` has one part, its whole config, with share 1.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable


@dataclass
class Part:
    name: str  # as the recipe names it: a domain's name or its folder
    share: float
    cfg: Any  # the recipe as this domain sees it (an omegaconf DictConfig)

    @property
    def label(self) -> str:
        """The domain in file and metric names (runs/<id>/eval-base-<label>/, domain/<label>/success)."""
        return re.sub(r"[^A-Za-z0-9_.-]", "_", Path(self.name.rstrip("/")).name) or "domain"


def parts(cfg) -> list[Part]:
    """The domains a composed train config trains on, in the order it names them."""
    if not cfg.domains:
        return [Part(str(cfg.domain), 1.0, cfg)]
    total = sum(float(e.weight) for e in cfg.domains)
    return [Part(str(e.name), float(e.weight) / total, domain_view(cfg, e)) for e in cfg.domains]


def several(cfg) -> bool:
    return bool(cfg.domains)


def run_domain(cfg) -> str:
    """What a run's folder and records name as its domain: the one as given, or the several's labels joined by
    '+' (a label is a folder's last part: a run id holds no '/')."""
    return "+".join(p.label for p in parts(cfg)) if several(cfg) else str(cfg.domain)


def model_domains(cfg):
    """What `tiny` is built from for this run: its domain, or every domain of the mix (one tokenizer for all)."""
    from ..domain.open import open_domain

    compiled = [open_domain(p.name, with_tasks=False, trust=cfg.trust).compiled for p in parts(cfg)]
    return compiled if several(cfg) else compiled[0]


def domain_view(cfg, entry):
    """`cfg` as the stages see one domain of the mix: its name, and its entry's tasks, db and user where set."""
    from omegaconf import OmegaConf

    from ..domain.task_templates import is_template_spec

    view = OmegaConf.create(OmegaConf.to_container(cfg))
    view.domain, view.domains = str(entry.name), []
    if entry.tasks is not None:  # what synth.tasks and tasks would be in a recipe of this domain alone
        tasks = entry.tasks if isinstance(entry.tasks, str) else [str(t) for t in entry.tasks]
        view.synth.tasks = tasks
        view.tasks = tasks if is_template_spec(tasks) else None
    if entry.db is not None:
        view.db = view.synth.db = view.eval.db = str(entry.db)
    if entry.user is not None:
        view.user.kind, view.user.model = ("scripted", None) if entry.user == "scripted" else ("litellm", str(entry.user))
    return view


def draw_part(rng: random.Random, parts: list[Part]) -> Part:
    """A part drawn with probability its share (one GRPO group's domain)."""
    return rng.choices(parts, weights=[p.share for p in parts])[0]


def mix_rows(rows: dict[str, list[dict]], shares: dict[str, float], seed: int) -> tuple[list[dict], dict[str, Any]]:
    """The SFT rows of several domains mixed by their shares: the largest mix in which each domain has its share
    (rounded) of the rows, none repeated, drawn with `seed` and shuffled together; the figures say how many rows
    each domain kept and how many it gave the mix. A domain that kept no rows leaves the mix empty only if every
    domain did: it is reported, and the others are mixed by their own shares."""
    have = {d: r for d, r in rows.items() if r}
    total = sum(shares[d] for d in have)
    share = {d: shares[d] / total for d in have}  # among the domains that kept rows
    size = min((len(r) / share[d] for d, r in have.items()), default=0.0)  # the largest mix the rows allow
    rng = random.Random(seed)
    mixed: list[dict] = []
    used: dict[str, int] = {}
    for d, r in have.items():
        used[d] = min(len(r), round(size * share[d]))
        mixed += rng.sample(r, used[d])
    rng.shuffle(mixed)
    figures = {d: {"kept": len(rows[d]), "mixed": used.get(d, 0), "share": round(shares[d], 4)} for d in rows}
    return mixed, figures


@dataclass
class Playing:
    """A part opened for play: its compiled domain and tasks, and the factory of its episodes' users."""

    part: Part
    opened: Any
    make_user: Callable[[], Any]

    @property
    def label(self) -> str:
        return self.part.label


def open_parts(cfg, user_factory: Callable[[Any], Callable[[], Any]]) -> list[Playing]:
    """Every part of the run opened, each with the user its view names (`user_factory(view)`)."""
    from ..domain.open import open_domain

    return [Playing(p, open_domain(p.name, trust=cfg.trust), user_factory(p.cfg)) for p in parts(cfg)]
