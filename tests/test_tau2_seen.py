"""What a model is shown through `muactl import tau2`, byte for byte as τ²-bench shows it (issue 28 §1, §3 mock).

tests/data/tau2/seen/<domain>.json holds digests recorded by benchmarks/tau2_record.py from τ²'s own code:
gold outputs' text, `Tool.openai_schema` per tool in τ²'s order, its LLMAgent's system prompt, its
UserSimulator's system prompt per task, its greeting. The fast tests here need no τ² checkout: the
records' shape, τ²'s schema recipe on invented source (digests recorded by running τ²'s Tool class on
it), and an end-to-end import of the invented checkout with invented prompt templates. The full
comparison against a checkout (TAU2_BENCH) is the slow test.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from muactl.cli import app

runner = CliRunner()
DATA = Path(__file__).parent / "data" / "tau2"
CHECKOUT = os.environ.get("TAU2_BENCH")
# agent tools, user tools, tasks, gold calls, as τ² at a2c0247 has them
SHAPES = {"retail": (16, 0, 114, 550), "airline": (14, 0, 50, 142), "telecom": (13, 30, 114, 516),
          "mock": (4, 2, 10, 8), "banking_knowledge": (15, 6, 97, 955)}


@pytest.mark.parametrize("domain", sorted(SHAPES))
def test_seen_record_is_complete_and_small(domain):
    seen = json.loads((DATA / "seen" / f"{domain}.json").read_text())
    truth = json.loads((DATA / f"{domain}.json").read_text())["tasks"]
    agent, user, tasks, calls = SHAPES[domain]
    assert (len(seen["agent_tools"]), len(seen["user_tools"])) == (agent, user)
    assert set(seen["user_prompts"]) == set(seen["outputs"]) == set(truth) and len(truth) == tasks
    assert [len(v) for v in seen["outputs"].values()] == [len(t["actions"]) for t in truth.values()]
    assert sum(map(len, seen["outputs"].values())) == calls
    digests = [seen["agent_prompt"], seen["greeting"], *seen["user_prompts"].values(),
               *(d for side in ("agent_tools", "user_tools") for _, d in seen[side]),
               *(d for v in seen["outputs"].values() for d in v)]
    assert all(len(d) == 16 and int(d, 16) >= 0 for d in digests)
    assert (DATA / "seen" / f"{domain}.json").stat().st_size < 60_000  # digests, not τ²'s text


# Invented source in τ²'s layout (no τ² text): each construct τ²'s schemas use, and a module that stops
# anyone who runs it.
DATA_MODEL = '''
from enum import Enum
from typing import List, Literal, Optional

from pydantic import BaseModel, Field

from tau2.utils.pydantic_utils import BaseModelNoExtra

Size = Literal["small", "large"]


class Colour(str, Enum):
    RED = "red"
    BLUE = "blue"


class Line(BaseModel):
    sku: str = Field(description="The stock keeping unit.")
    count: int = Field(1, description="How many.")


class Wrapping(BaseModelNoExtra):
    """How a parcel is wrapped."""

    colour: Colour = Field(Colour.RED, description="Paper colour.")
    note: Optional[str] = Field(None, description="A card, if any.")
    ribbons: Optional[int] = Field(2, description="Number of ribbons.")
'''
TOOLS = '''raise SystemExit("muactl must never run this file")
from typing import List, Optional, Union

from tau2.domains.shop.data_model import Colour, Line, Size, Wrapping
from tau2.environment.toolkit import ToolKitBase, ToolType, is_tool


class ShopTools(ToolKitBase):
    def _private(self) -> None:
        """Not a tool."""

    @is_tool(ToolType.WRITE)
    def place_order(self, customer: str, lines: List[Line | dict], size: Size, wrapping: Union[Wrapping, dict],
                    note: str = None, rush: bool = False) -> str:
        """Place an order for a customer. It is sent
        the same day.

        Orders over ten lines are split
        into parcels.

        Args:
            customer: The customer's id, such as 'c_1'.
            lines: The order lines. Each names a sku
                and a count.
            size: The parcel size.
            wrapping: How to wrap it.
            rush (bool): Whether to ship first.

        Returns:
            The order id.
        """

    @is_tool(ToolType.READ)
    def paint(self, colour: Colour | str, coats: Optional[int] = None) -> str:
        """Paint the parcel."""

    @is_tool(ToolType.READ)
    def ping(self):
        pass

    def helper_not_a_tool(self, x: int) -> int:
        """Assertion helper."""
'''
# sha256[:16] of json.dumps(Tool.openai_schema), titles included, from τ²'s ShopTools(None).get_tools() at
# a2c0247 (pydantic 2.14.4, docstring_parser 0.18.0) with the two modules above placed in its domains folder
TAU2_SCHEMAS = [("place_order", "405c6474de640187"), ("paint", "98fcddcd1d71b42a"), ("ping", "ce00ab2d0100464d")]


def test_tool_schemas_are_rebuilt_from_source_as_tau2_writes_them(tmp_path):
    from muactl.importers.tau2_schema import tau2_tool_schemas
    from muactl.importers.tau2_truth import text_digest

    code = tmp_path / "src" / "tau2" / "domains" / "shop"
    code.mkdir(parents=True)
    (code / "data_model.py").write_text(DATA_MODEL)
    (code / "tools.py").write_text(TOOLS)
    got = tau2_tool_schemas(tmp_path.resolve(), code)
    assert [(s["function"]["name"], text_digest(json.dumps(s))) for s in got["agent"]] == TAU2_SCHEMAS
    assert got["user"] == []
    place = got["agent"][0]["function"]
    assert place["description"].startswith("Place an order for a customer. It is sent\n\nthe same day.")
    assert place["parameters"]["properties"]["note"] == {"default": None, "title": "Note", "type": "string"}


def test_an_unreadable_construct_keeps_muactls_schema_and_the_order(tmp_path):
    from muactl.importers.tau2_schema import tau2_tool_schemas

    code = tmp_path / "d"
    code.mkdir()
    (code / "tools.py").write_text(TOOLS.replace("coats: Optional[int] = None", "coats: int = compute()"))
    got = tau2_tool_schemas(tmp_path.resolve(), code)
    assert [s["function"]["name"] for s in got["agent"]] == ["place_order", "paint", "ping"]
    assert "parameters" not in got["agent"][1]["function"]  # left to muactl's own


# invented prompt templates in τ²'s places and shapes
AGENT_PY = 'INSTRUCTION_NOTE = 1\nAGENT_INSTRUCTION = """\nBe a good agent.\n""".strip()\n' \
           'SYSTEM_PROMPT = """\n<i>\n{agent_instruction}\n</i>\n<p>\n{domain_policy}\n</p>\n""".strip()\n'
USER_PY = 'SYSTEM_PROMPT = """\n{global_user_sim_guidelines_with_persona}\n\n<s>\n{instructions}\n</s>\n""".strip()\n'
ORCHESTRATOR_PY = 'DEFAULT_FIRST_AGENT_MESSAGE = AssistantMessage(role="assistant", content="Hello there.", cost=0.0)\n'
SHOP_TOOLS = '''raise SystemExit("never run")
class RetailTools:
    @is_tool(ToolType.READ)
    def get_product_details(self, product_id: str) -> Product:
        """Get a product.

        Args:
            product_id: The product's id.
        """

    @is_tool(ToolType.READ)
    def find_user_id_by_email(self, email: str) -> str:
        """Find the id of a user from their email address.

        Args:
            email: The user's email address.
        """
'''


def test_import_shows_tau2s_prompts_schemas_and_output_bytes(tmp_path, monkeypatch):
    from muactl.compile.prompt import user_system_prompt
    from muactl.domain.validate import validate_domain
    from muactl.env.sandbox import new_env

    checkout = tmp_path / "tau2-bench"
    shutil.copytree(DATA / "checkout", checkout)
    for rel, text in (("src/tau2/agent/llm_agent.py", AGENT_PY), ("src/tau2/user/user_simulator.py", USER_PY),
                      ("src/tau2/orchestrator/orchestrator.py", ORCHESTRATOR_PY),
                      ("data/tau2/user_simulator/simulation_guidelines.md", "Play the user.<PERSONA_GUIDELINES>\n"),
                      ("src/tau2/domains/retail/tools.py", SHOP_TOOLS)):
        (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
        (checkout / rel).write_text(text)
    project = tmp_path / "project"
    project.mkdir()
    r = runner.invoke(app, ["import", "tau2", str(checkout), "--domain", "retail", "--dir", str(project)])
    assert r.exit_code == 0, r.output
    monkeypatch.chdir(project)
    opened = validate_domain("tau2-retail")
    policy = (checkout / "data/tau2/domains/retail/policy.md").read_text()
    assert opened.compiled.system_prompt == f"<i>\nBe a good agent.\n</i>\n<p>\n{policy}\n</p>"
    assert opened.spec.domain.greeting == "Hello there."
    task = opened.task("0").task
    assert user_system_prompt(opened.spec, task) == (
        "Play the user.\n\n\n<s>\nInstructions:\n\tDomain: retail\n\tReason for call:\n\t\tYou want to know the "
        "status of your order #W0000001.\n\tKnown info:\n\t\tYou are Ada Lamp, email ada@example.com.\n"
        "\tTask instructions:\n\t\tBe brief.\n</s>")
    r = runner.invoke(app, ["tools", "tau2-retail", "--json"])
    schemas = json.loads(r.output)
    assert [s["function"]["name"] for s in schemas[:2]] == ["get_product_details", "find_user_id_by_email"]
    assert schemas[0]["function"] == {"name": "get_product_details", "description": "Get a product.", "parameters": {
        "properties": {"product_id": {"description": "The product's id.", "title": "Product Id", "type": "string"}},
        "required": ["product_id"], "title": "parameters", "type": "object"}}
    env = new_env(opened.compiled)  # the text the agent reads
    try:
        text = env.call("get_product_details", {"product_id": "1000000001"}).content
    finally:
        env.close()
    assert text.startswith('{"name": "Lamp", "product_id": "1000000001", "variants": {"2000000001": {"item_id": '), text


def test_a_domain_without_its_own_prompts_keeps_muactls():
    """A folder imported before (no agent_prompt/user_prompt) means what it meant: muactl's prompts."""
    from muactl.compile.prompt import AGENT_CONVENTIONS, DEFAULT_GUIDELINES, user_system_prompt
    from muactl.domain.open import open_domain

    opened = open_domain("retail")  # built-in, written before domains could bring prompts
    assert opened.compiled.system_prompt.startswith(AGENT_CONVENTIONS)
    assert user_system_prompt(opened.spec, opened.tasks[0].task).startswith(DEFAULT_GUIDELINES)


def test_a_shown_schema_must_name_the_params():
    from pydantic import ValidationError

    from muactl.spec.models import SqlTool

    with pytest.raises(ValidationError, match=r"schema's properties \(b\) must be the params \(a\)"):
        SqlTool.model_validate({"description": "d", "params": {"a": {"type": "string"}}, "query": "SELECT 1",
                                "schema": {"type": "object", "properties": {"b": {"type": "string"}}}})
    with pytest.raises(ValidationError, match="not a valid JSON Schema"):
        SqlTool.model_validate({"description": "d", "query": "SELECT 1", "schema": {"type": "object", "properties": 3}})


def test_tau2s_initialization_data_and_message_history_become_setup_calls():
    from muactl.importers.tau2 import convert_task

    task = {"id": "t", "user_scenario": {"persona": "Calm", "instructions": {"reason_for_call": "Go",
            "plain_text": "Go"}}, "evaluation_criteria": None, "initial_state": {
        "initialization_data": {"agent_data": {"users": {"u": {"tasks": ["a"]}}}, "user_data": {"inbox": {"n": {}}}},
        "initialization_actions": [{"func_name": "add", "arguments": {"x": 1}, "assert_value": True}],
        "message_history": [{"tool_calls": None}, {"tool_calls": [{"name": "create", "arguments": {"y": 2}}]}]}}
    got = convert_task(task, "test")
    assert got["setup"] == [{"update_users": {"records": {"u": {"tasks": ["a"]}}}},
                            {"update_inbox": {"records": {"n": {}}}}, {"add": {"x": 1}}, {"create": {"y": 2}}]
    assert got["user"]["scenario"] == "Persona:\n\tCalm\nInstructions:\n\tGo"


@pytest.mark.skipif(not CHECKOUT, reason="set TAU2_BENCH to a τ²-bench checkout to import its data")
@pytest.mark.slow
@pytest.mark.parametrize("domain", sorted(SHAPES))
def test_everything_shown_is_tau2s_bytes(domain, tmp_path, monkeypatch):
    from muactl.domain.validate import validate_domain
    from muactl.importers.tau2_seen import verify_seen

    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["import", "tau2", CHECKOUT, "--domain", domain])
    assert r.exit_code == 0, r.output
    # banking_knowledge: the tasks whose gold paths need a tool not ported yet are left out (and said so)
    left_out = {line.split("'")[1] for line in r.output.splitlines() if " left out: " in line}
    seen = json.loads((DATA / "seen" / f"{domain}.json").read_text())
    got = verify_seen(validate_domain(f"tau2-{domain}"), seen)
    assert [m for m in got["seen_mismatches"] if m.split(":")[0].removeprefix("task ") not in left_out] == []
    agent, user, tasks, calls = SHAPES[domain]
    calls -= sum(len(seen["outputs"][t]) for t in left_out)
    assert (got["outputs_bytes_same"], got["agent_schemas_same"], got["user_schemas_same"]) == (calls, agent, user)
    assert got["user_prompts_same"] == tasks - len(left_out) and got["agent_prompt_same"] and got["greeting_same"]
    if domain == "banking_knowledge":  # τ²'s golden retrieval: each task's documents in its agent prompt
        from muactl.importers.tau2_seen import same_golden_prompts

        r = runner.invoke(app, ["import", "tau2", CHECKOUT, "--domain", domain, "--retrieval", "golden"])
        assert r.exit_code == 0, r.output
        golden = validate_domain(f"tau2-{domain}-golden")
        assert same_golden_prompts(golden, seen["golden_agent_prompts"], []) == (tasks, tasks - len(left_out))


def test_airline_reservation_flights_are_in_tau2s_field_order():
    """τ²'s db.json holds a reservation's flights as origin, destination, flight_number...; its model dumps
    flight_number first, and that text is what its agent reads."""
    from muactl.importers.tau2 import FIELD_ORDER, in_field_order

    db = {"reservations": {"R1": {"flights": [{"origin": "A", "destination": "B", "flight_number": "F1",
                                               "date": "d", "price": 1, "extra": 0}, "odd"]}}}
    in_field_order(db, FIELD_ORDER["airline"])
    assert list(db["reservations"]["R1"]["flights"][0]) == ["flight_number", "origin", "destination", "date",
                                                            "price", "extra"]
    assert db["reservations"]["R1"]["flights"][1] == "odd"
