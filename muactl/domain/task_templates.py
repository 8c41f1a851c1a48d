"""Task templates: load and check tasks/<domain>/templates.yaml, draw concrete task instances from
them (on the domain's seed database or on a random instance), write them as task files.

An instance is fixed by (template, seed, db_seed): the seed draws the binding row, derived values and
persona; db_seed names the random database (None: the fixed one). Every instance's gold path is
replayed before it is used; one that fails is dropped and reported, never silently kept.

Seed streams: on-the-fly draws take instance k's seed from `stream_seed(split, seed, k)`, where train
seeds lie in [0, 2^31) and test seeds in [2^31, 2^32), so no test instance (and no test database) can
be drawn for training whatever seeds the two runs use.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..compile.sql import bind_value, param_names
from ..env.budget import SqlLimitExceeded
from ..env.sandbox import OUTSIDE_KINDS, new_env
from ..env.values import decode_json_text
from ..errors import Problem, SpecError, UsageError
from ..limits import MAX_INSTANCES, MAX_SAMPLE_ROWS
from ..compile.randomdb import Drawer, instance
from ..env.gold import assertion_result, gold_actions
from ..spec import models as m
from ..spec.problems import validate
from ..spec.tasks import TaskSpec
from ..spec.source import Located, load_yaml
from ..spec.task_templates import TaskTemplate, placeholder_fields

TEMPLATES_FILE = "templates.yaml"
TRAIN_BASE, TEST_BASE, SPAN = 0, 2**31, 2**31
PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([A-Za-z_]\w*(?:\.\w+)*)\}")
_WHOLE = re.compile(r"^\{([A-Za-z_]\w*(?:\.\w+)*)\}$")


@dataclass
class TaskTemplateSpec:
    template: TaskTemplate
    file: Path
    index: int
    doc: Located
    data: dict[str, Any]
    prefix: tuple = ()

    @property
    def id(self) -> str:
        return self.template.id

    def problem(self, path: tuple, message: str) -> Problem:
        return self.doc.problem(path, message, prefix=self.prefix + (self.index,))


# ---------------------------------------------------------------- loading


def load_templates(tasks_dir: Path | None) -> list[TaskTemplateSpec]:
    """The domain's templates ([] when it has no templates.yaml); problems raised together."""
    found = [tasks_dir / name for name in (TEMPLATES_FILE, "templates.yml")] if tasks_dir is not None else []
    found = [p for p in found if p.is_file()]
    if not found:
        return []
    if len(found) > 1:
        raise SpecError.single(found[1], f"both {found[0].name} and {found[1].name} exist; keep one templates file")
    path = found[0]
    doc = load_yaml(path)
    data, prefix = doc.data, ()
    if isinstance(data, dict) and set(data) == {"templates"}:
        data, prefix = data["templates"], ("templates",)
    if not isinstance(data, list):
        raise SpecError([doc.problem(prefix, "expected a list of templates (each starting with '- id: ...')")])
    out, problems, seen = [], [], {}
    for i, item in enumerate(data):
        tpl, found = validate(doc, TaskTemplate, item, prefix=prefix + (i,))
        problems += found
        if tpl is None:
            continue
        ts = TaskTemplateSpec(tpl, path, i, doc, item, prefix)
        if tpl.id in seen:
            problems.append(ts.problem(("id",), f"duplicate template id '{tpl.id}' (first at line "
                                       f"{doc.pos(prefix + (seen[tpl.id], 'id'))[0]})"))
        seen[tpl.id] = i
        out.append(ts)
    named = [item.get("id") for item in data if isinstance(item, dict)]  # a partner with its own problem still exists
    problems += [ts.problem(("contrast", "template"), why) for ts, why in _contrast_problems(out, named)]
    if problems:
        raise SpecError(problems)
    return out


def _contrast_problems(templates: list[TaskTemplateSpec], ids: list) -> list[tuple[TaskTemplateSpec, str]]:
    found = []
    for ts in templates:
        partner = ts.template.contrast.template if ts.template.contrast else None
        if partner is None:
            continue
        if partner == ts.id:
            found.append((ts, f"a template cannot be its own contrast ('{partner}')"))
        elif partner not in ids:
            found.append((ts, f"no template '{partner}' in this file; templates: {', '.join(map(str, ids))}"))
    return found


def placeholders(text: str) -> list[str]:
    return [m[1] for m in PLACEHOLDER.finditer(text) if m[1]]


# ---------------------------------------------------------------- instances


def _lookup(name: str, b: dict[str, Any]) -> Any:
    parts = name.split(".")
    v = b[parts[0]]
    for p in parts[1:]:
        v = v[int(p)] if isinstance(v, list) else v[p]
    return v


def _text(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, (dict, list)):
        return json.dumps(v, ensure_ascii=False)
    return "" if v is None else str(v)


def fill(node: Any, b: dict[str, Any]) -> Any:
    """Replace {placeholders}; a string that is one placeholder keeps the value's type (an amount
    stays an integer), {{ and }} are literal braces."""
    if isinstance(node, str):
        whole = _WHOLE.match(node)
        if whole:
            return _lookup(whole[1], b)
        return PLACEHOLDER.sub(lambda mt: _text(_lookup(mt[1], b)) if mt[1] else mt[0][0], node)
    if isinstance(node, dict):
        return {fill(k, b) if isinstance(k, str) else k: fill(v, b) for k, v in node.items()}
    if isinstance(node, list):
        return [fill(v, b) for v in node]
    return node


class LimitStop(str):
    """Why a try was dropped when a statement was stopped by its SQL budget: every later try of the template
    would spend that budget again, so a draw gives the template up."""


class NoPartner(str):
    """Why a contrast partner was not drawn when nothing is wrong: no sample row shares the bindings (bank: a customer
    with no empty account). Its pair is dropped; every other reason is a problem of the templates."""


def _failed(what: str, e: Exception) -> str:
    text = f"{what} failed: {e}"
    return LimitStop(text) if isinstance(e, SqlLimitExceeded) and e.spent else text


def instance_id(template: str, bindings: dict, db_seed: int | None) -> str:
    digest = hashlib.sha256(json.dumps([template, bindings, db_seed], sort_keys=True, default=str).encode())
    return f"{template}-{digest.hexdigest()[:10]}"


def instantiate(ts: TaskTemplateSpec, opened, seed: int, db_seed: int | None = None,
                split: str | None = None, only: dict[str, Any] | None = None) -> tuple[TaskSpec | None, str]:
    """One task from a template, its gold path replayed; (None, why) when it cannot be made. `only`: the
    binding row is drawn among the sample rows with these values (a contrast's partner)."""
    t = ts.template
    domain = instance(opened.compiled, db_seed)
    env = new_env(domain)
    try:
        try:
            names, raw = env.select(t.sample, max_rows=MAX_SAMPLE_ROWS)
        except Exception as e:  # a driver error on real data (a bad json path, say): data for the report
            return None, _failed("the sample query", e)
        rows = [dict(zip(names, (decode_json_text(v) for v in r))) for r in raw]
        missing = sorted(set(only or ()) - set(names))
        if missing:
            return None, f"contrast: the sample query has no column {', '.join(missing)}"
        if not rows:
            return None, "the sample query returned no rows"
        if only:
            rows = [r for r in rows if all(r[k] == v for k, v in only.items())]
            if not rows:
                return None, NoPartner("contrast: no sample row has the same " +
                                       ", ".join(f"{k}={v!r}" for k, v in only.items()))
        rows.sort(key=lambda r: json.dumps(r, sort_keys=True, default=str))  # independent of the query plan
        rng = random.Random(f"{t.id}:{seed}")
        b = dict(rng.choice(rows))
        drawer = Drawer({}, 0)
        drawer.rng = rng
        for name, spec in t.derive.items():
            if isinstance(spec, str):
                try:
                    _, found = env.select(spec, {p: bind_value(b[p]) for p in param_names(spec)})
                except Exception as e:
                    return None, _failed(f"derive {name}", e)
                b[name] = decode_json_text(found[0][0]) if found else None
            else:
                b[name] = drawer.value(spec, {}, None)
        pool = [t.persona] if isinstance(t.persona, str) else list(t.persona or [])
        body: dict[str, Any] = {"id": instance_id(t.id, b, db_seed)}
        if split:
            body["split"] = split
        if pool:
            body["persona"] = rng.choice(pool)
        try:
            body.update(fill(placeholder_fields(ts.data), b))
        except (KeyError, IndexError, TypeError) as e:
            return None, f"a placeholder could not be filled: {e}"
        # text fields stay text even when they are one placeholder holding a number ("{balance}")
        body["user"] = {k: _text(v) if v is not None else v for k, v in body.get("user", {}).items()}
        expect = body.get("expect") or {}
        for key in ("outputs", "nl_assertions"):
            if key in expect:
                expect[key] = [_text(o) for o in expect[key]]
        if expect.get("refusal") is not None:
            expect["refusal"] = _text(expect["refusal"])
        body["origin"] = {"template": t.id, "bindings": b, "seed": seed, "db_seed": db_seed}
        try:
            task = m.Task.model_validate(body)
        except Exception as e:
            return None, f"the filled task is not valid: {' '.join(str(e).splitlines()[1:3])}"
    finally:
        env.close()
    why = replay_gold(task, domain)
    if why:
        return None, why
    return TaskSpec(task, ts.file, ts.index, ts.doc), ""


def replay_gold(task: m.Task, domain) -> str:
    """'' when setup and gold actions run without error and every assertion holds; else why not."""
    env = new_env(domain)
    try:
        for group, calls in (("setup", task.setup), ("gold action", gold_actions(task, domain))):
            for call in calls:
                name, args = m.call_parts(call)
                tool = domain.tools.get(name)
                if tool is not None and tool.kind in OUTSIDE_KINDS:
                    continue  # played by an LLM or an MCP server in episodes: nothing to replay here
                result = env.call(name, args)
                if result.error:
                    return f"{group} {name} fails: {result.content}"
        for a in task.expect.assert_:
            ok, why = assertion_result(env, a)
            if not ok and a.holds_after_gold:
                return f"assertion {a.query or a.call!r} does not hold after the gold actions: {why}"
        return ""
    finally:
        env.close()


# ---------------------------------------------------------------- drawing many


def stream_seed(split: str | None, seed: int, k: int) -> int:
    """Seed of the k-th on-the-fly instance; train and test streams never overlap."""
    base = TEST_BASE if split == "test" else TRAIN_BASE
    return base + (seed * 1_000_003 + k) % SPAN


def instance_key(task: m.Task) -> tuple:
    o = task.origin
    return (o.template, json.dumps(o.bindings, sort_keys=True, default=str), o.db_seed)


def select_templates(opened, spec: str | list[str] | None) -> list[TaskTemplateSpec]:
    """`template:all`, `template:<id>`, or a list of ids (`template:a,b,b`: drawn in turn, so an id named twice is
    drawn twice as often)."""
    if not opened.templates:
        raise UsageError(f"domain {opened.ref.name} has no templates (write tasks/{opened.ref.name}/{TEMPLATES_FILE})")
    if isinstance(spec, str):
        spec = spec.removeprefix("template:")
        ids = None if spec in ("all", "") else [s for s in spec.split(",") if s]
    else:
        ids = spec
    if not ids:
        return list(opened.templates)
    by_id = {ts.id: ts for ts in opened.templates}
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise UsageError(f"no template '{missing[0]}' in domain {opened.ref.name}; templates: {', '.join(by_id)}")
    return [by_id[i] for i in ids]


def is_template_spec(tasks: Any) -> bool:
    if isinstance(tasks, (list, tuple)):
        return len(tasks) == 1 and is_template_spec(tasks[0])
    return isinstance(tasks, str) and tasks.startswith("template:")


@dataclass
class Drawn:
    tasks: list[TaskSpec] = field(default_factory=list)
    dropped: list[tuple[str, int, int | None, str]] = field(default_factory=list)  # template, seed, db_seed, why
    duplicates: int = 0


def contrast_partner(ts: TaskTemplateSpec, task: TaskSpec, opened, seed: int, db_seed: int | None,
                     split: str | None) -> tuple[TaskSpec | None, str]:
    """The instance of ts's contrast template on task's database, sharing its `same` bindings; (None, why)."""
    c = ts.template.contrast
    bindings = task.task.origin.bindings
    missing = [k for k in c.same if k not in bindings]
    if missing:
        return None, f"contrast: {', '.join(missing)} is not a binding of template '{ts.id}'"
    partner = next(p for p in opened.templates if p.id == c.template)
    return instantiate(partner, opened, seed, db_seed, split, only={k: bindings[k] for k in c.same})


def draw(opened, templates: list[TaskTemplateSpec], n: int, seed_of, split: str | None = None,
         max_tries: int | None = None, contrast: bool = False) -> Drawn:
    """n distinct instances, templates taken in turn; seed_of(k) -> (seed, db_seed) for the k-th try. With
    `contrast`, an instance of a template that declares one is followed by its partner (contrast_partner); a
    pair is kept whole or dropped whole, except that the n-th instance may be a pair's first half."""
    if n > MAX_INSTANCES:  # a recipe's eval.n, a run grown by --n: each instance replays its gold path
        raise UsageError(f"{n:,} task instances asked for; one draw makes at most {MAX_INSTANCES:,} "
                         "(MAX_INSTANCES in muactl/limits.py)")
    out = Drawn()
    keys: set[tuple] = set()
    tries = max_tries if max_tries is not None else 4 * n + 20
    given_up: set[str] = set()
    for k in range(tries):
        if len(out.tasks) >= n or len(given_up) == len(templates):
            break
        ts = templates[k % len(templates)]
        if ts.id in given_up:
            continue
        seed, db_seed = seed_of(k)
        task, why = instantiate(ts, opened, seed, db_seed, split)
        if task is None:
            out.dropped.append((ts.id, seed, db_seed, why))
            if isinstance(why, LimitStop):
                given_up.add(ts.id)
            continue
        made = [task]
        if contrast and ts.template.contrast is not None:
            partner, why = contrast_partner(ts, task, opened, seed, db_seed, split)
            if partner is None:
                out.dropped.append((ts.template.contrast.template, seed, db_seed, why))
                if isinstance(why, LimitStop):  # every later pair would spend the partner's budget again
                    given_up.add(ts.id)
                continue
            made.append(partner)
        made = made[:n - len(out.tasks)]
        made_keys = [instance_key(t.task) for t in made]
        if keys.intersection(made_keys):
            out.duplicates += 1
            continue
        keys.update(made_keys)
        out.tasks += made
    return out


def draw_stream(opened, spec, n: int, seed: int, db: str = "random", split: str | None = "train",
                contrast: bool = False) -> Drawn:
    """On-the-fly instances for eval, synth and training (see the module docstring for the streams); `contrast`:
    see draw."""
    if db not in ("fixed", "random"):
        raise UsageError(f"db must be 'fixed' or 'random', not '{db}'")
    templates = select_templates(opened, spec)

    def seed_of(k: int) -> tuple[int, int | None]:
        s = stream_seed(split, seed, k)
        return s, (s if db == "random" else None)

    drawn = draw(opened, templates, n, seed_of, split, contrast=contrast)
    if not drawn.tasks:
        why = drawn.dropped[0][3] if drawn.dropped else "nothing drawn"
        raise UsageError(f"no task instance could be drawn from {', '.join(t.id for t in templates)}: {why}")
    return drawn


def domain_for(opened, task: TaskSpec):
    """The database a task runs on: its random instance if it came from one, else the seed database."""
    o = task.task.origin
    return instance(opened.compiled, o.db_seed) if o is not None and o.db_seed is not None else opened.compiled


def generate(opened, template_ids: list[str] | None, n: int, seed: int, db_seed: int | None = None,
             split: str = "train") -> Drawn:
    """`muactl tasks generate`: instance k uses seed + k and, with db_seed, random database db_seed + k."""
    templates = select_templates(opened, template_ids)
    return draw(opened, templates, n, lambda k: (seed + k, None if db_seed is None else db_seed + k), split)


def write_tasks(tasks: list[TaskSpec], path: Path, header: str = "", width: int = 110) -> None:
    """`width`: where ruamel folds long strings (a fold right after an escaped tab reads back as a space)."""
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.default_flow_style = False
    yaml.width = width
    docs = [t.task.model_dump(by_alias=True, exclude_unset=True, mode="json") for t in tasks]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        if header:
            f.write("".join(f"# {line}\n" for line in header.splitlines()) + "\n")
        yaml.dump(docs, f)
