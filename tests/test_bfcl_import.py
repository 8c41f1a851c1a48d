"""`muactl import bfcl` checked against BFCL's own classes (issue 29, BFCL-V3 multi-turn).

The ground truth (tests/data/bfcl/truth.json) was recorded by benchmarks/bfcl_record.py running BFCL's Python
classes and multi_turn_checker offline; it holds digests only. The import of the real data needs a checkout:
set BFCL to one (ShishirPatil/gorilla) to run that test; without it it is skipped. The other tests build a
BFCL-shaped checkout of invented data (the layout, class, function and constant names are BFCL's, the values
are not) and import it end to end. The expected outputs below are what BFCL's Python classes print for these
calls (json.dumps of a dict, str() of a list, Python's float repr and format). Agents are muactl's oracle and
small scripted agents (no model).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from muactl.cli import app

runner = CliRunner()
DATA = Path(__file__).parent / "data" / "bfcl"
CHECKOUT = os.environ.get("BFCL")
WIDE = {"COLUMNS": "200"}
SEED = 42
STATE = {"account_info": {"account_id": 7, "balance": 50.0, "binding_card": 1111222233334444},
         "authenticated": False, "market_status": "Open", "order_counter": 500,
         "stocks": {"NOVA": {"price": 12.25, "percent_change": -0.31, "volume": 1.5, "MA(5)": 12.0, "MA(20)": 11.5},
                    "ORBT": {"price": 99.1, "percent_change": 0.05, "volume": 0.25, "MA(5)": 98.0, "MA(20)": 97.0}},
         "watch_list": ["ORBT"], "transaction_history": [],
         "orders": {"400": {"id": 400, "order_type": "Sell", "symbol": "ORBT", "price": 98.5, "amount": 2,
                            "status": "Completed"}}}
DEFAULT_STATE = {"orders": {}, "account_info": {"account_id": 1, "balance": 0.0, "binding_card": 1},
                 "authenticated": False, "market_status": "Closed", "order_counter": 1, "stocks": {},
                 "watch_list": [], "transaction_history": [], "random_seed": SEED}
LOGIN = "trading_login(username='ana', password='pw')"
BUY = "place_order(order_type='Buy', symbol='NOVA', price=12.5, amount=3)"
FUND = "fund_account(amount=100)"
ADDED = "I have updated some more functions you can choose from. What about now?"


def user(text):
    return [{"role": "user", "content": text}]


def entries() -> dict[str, list[tuple[dict, list]]]:
    """Per category, (entry, ground_truth) pairs: one per imported class, and one involving a class not imported."""
    base = {"question": [user("Log me in (ana, pw) and buy 3 NOVA at 12.5."), user("Put 100 in my account."),
                         user("Show my transactions.")],
            "initial_config": {"TradingBot": STATE}, "involved_classes": ["TradingBot"]}
    gold = [[LOGIN, BUY], [FUND], ["get_transaction_history()"]]
    math = {"question": [user("What is 2 + 3?")], "initial_config": {}, "involved_classes": ["MathAPI", "TradingBot"]}
    travel = {"question": [user("Log me in to travel as Ana Li.")], "initial_config": {"TravelAPI": TRAVEL},
              "involved_classes": ["TravelAPI", "TradingBot"]}
    files = {"question": [user("In docs, make b.txt.")], "initial_config": {"GorillaFileSystem": TREE},
             "involved_classes": ["GorillaFileSystem"]}
    files_gold = [["cd(folder='docs')", "touch(file_name='b.txt')"]]
    message = {"question": [user("Log in as USR001 and send Bo 'hi'.")], "initial_config": {"MessageAPI": {
        "user_map": {"Ana": "USR001", "Bo": "USR002"}, "current_user": None}}, "involved_classes": ["MessageAPI"]}
    message_gold = [["message_login(user_id='USR001')", "send_message(receiver_id='USR002', message='hi')"]]
    ticket = {"question": [user("Log in as Ana (pw) and open a ticket 'Broken'.")], "initial_config": {"TicketAPI": {
        "ticket_queue": [{"id": 3, "title": "Old", "status": "Open", "created_by": "Ana"}], "ticket_counter": 4}},
        "involved_classes": ["TicketAPI"]}
    ticket_gold = [["ticket_login(username='Ana', password='pw')", "create_ticket(title='Broken', priority=2)"]]
    twitter = {"question": [user("Log in (ana, pw) and tweet 'hi'.")], "initial_config": {"TwitterAPI": {
        "tweets": {"0": {"id": 0, "username": "cy", "content": "Old News", "tags": ["#x"], "mentions": []}},
        "comments": {"0": [{"username": "bo", "content": "first"}]}, "tweet_counter": 1}}, "involved_classes": ["TwitterAPI"]}
    twitter_gold = [["authenticate_twitter(username='ana', password='pw')", "post_tweet(content='hi')"]]
    vehicle = {"question": [user("Lock the driver's door.")], "initial_config": {"VehicleControlAPI": {
        "engineState": "stopped", "fuelLevel": 10.5, "doorStatus": {"driver": "unlocked", "passenger": "locked", "rear_left": "locked",
                                                          "rear_right": "locked"}}},
        "involved_classes": ["VehicleControlAPI"]}
    vehicle_gold = [["lockDoors(unlock=False, door=['driver'])"]]
    out = {}
    for category in ("base", "miss_func", "miss_param", "long_context"):
        first = dict(base, id=f"multi_turn_{category}_0")
        truth = gold
        if category == "miss_func":  # fund_account held out until turn 2, whose question is empty
            first["question"] = [base["question"][0], user("Put 100 in my account."), [], base["question"][2]]
            first["missed_function"] = {"2": ["fund_account"]}
            truth = [gold[0], [], [FUND], gold[2]]
        files_entry, files_truth = dict(files, id=f"multi_turn_{category}_7"), files_gold
        if category == "miss_func":  # BFCL's own gold calls cat a turn before its function is added
            files_entry["question"] = files["question"] + [[]]
            files_entry["missed_function"] = {"1": ["cat"]}
            files_truth = [files_gold[0] + ["cat(file_name='b.txt')"], []]
        if category == "long_context":  # a positional argument, and the long data BFCL adds
            first["question"] = base["question"] + [user("And NOVA's details?")]
            truth = gold + [["get_stock_info('NOVA')"]]
        out[category] = [(first, truth), (dict(math, id=f"multi_turn_{category}_1"), [["add(a=2, b=3)"]]),
                         (dict(message, id=f"multi_turn_{category}_2"), message_gold),
                         (dict(ticket, id=f"multi_turn_{category}_3"), ticket_gold),
                         (dict(twitter, id=f"multi_turn_{category}_4"), twitter_gold),
                         (dict(vehicle, id=f"multi_turn_{category}_5"), vehicle_gold),
                         (dict(travel, id=f"multi_turn_{category}_6"), [[AUTH]]),
                         (files_entry, files_truth)]
    return out


TREE = {"root": {"ana": {"type": "directory", "contents": {
    "docs": {"type": "directory", "contents": {"a.txt": {"type": "file", "content": "b line\na line\nc"},
                                               "sub": {"type": "directory", "contents": {}}}},
    "notes.txt": {"type": "file", "content": "b line\nx line"}}}}}
TRAVEL_SEED = 5
TRAVEL = {"random_seed": TRAVEL_SEED, "credit_card_list": {"card_1": {
    "card_number": "4111", "expiration_date": "12/30", "cardholder_name": "Ana Li", "card_verification_number": 123,
    "balance": 1000.0}}}
AUTH = ("authenticate_travel(client_id='c', client_secret='s', refresh_token='r', grant_type='read_write', "
        "user_first_name='Ana', user_last_name='Li')")
TRAVEL_TOOLS = ("authenticate_travel", "travel_get_login_status", "get_budget_fiscal_year", "register_credit_card",
                "get_flight_cost", "get_credit_card_balance", "book_flight", "retrieve_invoice", "get_booking_history",
                "list_all_airports", "cancel_booking", "compute_exchange_rate", "verify_traveler_information",
                "set_budget_limit", "get_nearest_airport_by_city", "purchase_insurance", "contact_customer_support",
                "get_all_credit_cards")
FILE_TOOLS = ("cat", "cd", "cp", "diff", "du", "echo", "find", "grep", "ls", "mkdir", "mv", "pwd", "rm", "rmdir", "sort",
              "tail", "touch", "wc")
MESSAGE_TOOLS = ("list_users", "get_user_id", "message_login", "message_get_login_status", "send_message",
                 "delete_message", "view_messages_sent", "add_contact", "search_messages", "get_message_stats")
TICKET_TOOLS = ("create_ticket", "get_ticket", "close_ticket", "resolve_ticket", "edit_ticket", "ticket_login",
                "ticket_get_login_status", "logout", "get_user_tickets")
TWITTER_TOOLS = ("authenticate_twitter", "posting_get_login_status", "post_tweet", "retweet", "comment", "mention",
                 "follow_user", "list_all_following", "unfollow_user", "get_tweet", "get_user_tweets", "search_tweets",
                 "get_tweet_comments", "get_user_stats")
VEHICLE_TOOLS = ("startEngine", "fillFuelTank", "lockDoors", "adjustClimateControl", "get_outside_temperature_from_google",
                 "get_outside_temperature_from_weather_com", "setHeadlights", "displayCarStatus", "activateParkingBrake",
                 "pressBrakePedal", "releaseBrakePedal", "setCruiseControl", "get_current_speed", "display_log",
                 "estimate_drive_feasibility_by_mileage", "liter_to_gallon", "gallon_to_liter", "estimate_distance",
                 "get_zipcode_based_on_city", "set_navigation", "check_tire_pressure", "find_nearest_tire_shop")
MATH_TOOLS = ("logarithm", "mean", "standard_deviation", "si_unit_conversion", "imperial_si_conversion", "add",
              "subtract", "multiply", "divide", "power", "square_root", "absolute_value", "round_number", "percentage",
              "min_value", "max_value", "sum_values")
OWN_TOOLS = {"MessageAPI": MESSAGE_TOOLS, "TicketAPI": TICKET_TOOLS, "TwitterAPI": TWITTER_TOOLS,
             "VehicleControlAPI": VEHICLE_TOOLS, "MathAPI": MATH_TOOLS, "GorillaFileSystem": FILE_TOOLS,
             "TravelAPI": TRAVEL_TOOLS}
VEHICLE_SEED = 99
VEHICLE = {"random_seed": VEHICLE_SEED, "fuelLevel": 0.0, "batteryVoltage": 12.6, "engine_state": "stopped",
           "remainingUnlockedDoors": 4, "doorStatus": {"driver": "unlocked", "passenger": "unlocked",
                                                       "rear_left": "unlocked", "rear_right": "unlocked"},
           "acTemperature": 25.0, "fanSpeed": 50, "acMode": "auto", "humidityLevel": 50.0, "headLightStatus": "off",
           "parkingBrakeStatus": "released", "_parkingBrakeForce": 0.0, "_slopeAngle": 0.0,
           "brakePedalStatus": "released", "brakePedalForce": 0.0, "distanceToNextVehicle": 50.0,
           "cruiseStatus": "inactive", "destination": "None", "frontLeftTirePressure": 32.0,
           "frontRightTirePressure": 32.0, "rearLeftTirePressure": 30.0, "rearRightTirePressure": 30.0}
MESSAGE_SEED = 7


def docs_of_shipped_tools(cls: str) -> list[dict]:
    """BFCL-style function docs for the class's tools muactl ships (invented descriptions)."""
    from ruamel.yaml import YAML

    from muactl.importers.bfcl import HERE

    tools = YAML(typ="safe").load((HERE / "bfcl.yaml").read_text())["tools"]
    return [{"name": n, "description": f"Invented: {n}.", "parameters": {"type": "dict", "properties": {
        p: {"type": "string", "description": f"the {p}"} for p in (t.get("params") or {})}}}
            for n, t in tools.items() if t.get("side") != "env"
            and (n in OWN_TOOLS[cls] if cls in OWN_TOOLS else not any(n in o for o in OWN_TOOLS.values()))]


def fake_checkout(root: Path) -> Path:
    from muactl.importers.bfcl_truth import CLASS_DOCS

    ev = root / "berkeley-function-call-leaderboard" / "bfcl_eval"
    (ev / "data" / "possible_answer").mkdir(parents=True)
    (ev / "data" / "multi_turn_func_doc").mkdir()
    for category, pairs in entries().items():
        name = f"BFCL_v4_multi_turn_{category}.json"
        (ev / "data" / name).write_text("".join(json.dumps(e) + "\n" for e, _ in pairs))
        (ev / "data" / "possible_answer" / name).write_text(
            "".join(json.dumps({"id": e["id"], "ground_truth": g}) + "\n" for e, g in pairs))
    for cls, stem in CLASS_DOCS.items():
        docs = docs_of_shipped_tools(cls) if cls in ("TradingBot", *OWN_TOOLS) else [
            {"name": f"{stem}_fn", "description": "Invented.",
             "parameters": {"type": "dict", "properties": {"a": {"type": "float"}, "b": {"type": "float"}}}}]
        (ev / "data" / "multi_turn_func_doc" / f"{stem}.json").write_text("".join(json.dumps(d) + "\n" for d in docs))
    src = ev / "eval_checker" / "multi_turn_eval" / "func_source_code"
    src.mkdir(parents=True)
    (src / "trading_bot.py").write_text(
        f"import random\n\nDEFAULT_STATE = {DEFAULT_STATE!r}\n\n\nclass TradingBot:\n"
        "    def _load_scenario(self, scenario, long_context=False):\n"
        "        self._random = random.Random(scenario.get('random_seed', DEFAULT_STATE['random_seed']))\n")
    (src / "message_api.py").write_text(
        "import random\n\nDEFAULT_STATE = {'generated_ids': set(), 'user_count': 1, 'user_map': {'Ana': 'USR001'}, "
        "'inbox': [{'USR001': 'hello there'}], 'message_count': 1, 'current_user': None}\n\n\nclass MessageAPI:\n"
        "    def _load_scenario(self, scenario, long_context=False):\n"
        f"        self._random = random.Random((scenario.get('random_seed', {MESSAGE_SEED})))\n")
    (src / "ticket_api.py").write_text("DEFAULT_STATE = {'ticket_queue': [], 'ticket_counter': 1, 'current_user': None}\n")
    (src / "posting_api.py").write_text(
        "DEFAULT_STATE = {'username': 'ana', 'password': 'pw', 'authenticated': False, 'tweets': {}, 'comments': {}, "
        "'retweets': {}, 'following_list': ['bo'], 'tweet_counter': 0}\n")
    (src / "vehicle_control.py").write_text(
        f"import random\n\nDEFAULT_STATE = {VEHICLE!r}\n\n\nclass VehicleControlAPI:\n"
        "    def _load_scenario(self, scenario, long_context=False):\n"
        "        self._random = random.Random(scenario.get('random_seed', DEFAULT_STATE['random_seed']))\n")
    (src / "long_context.py").write_text(
        "MA_5_EXTENSION = [1.5, 2.25]\nMA_20_EXTENSION = [3.125]\n"
        "ORDER_DETAIL_EXTENSION = {'note': 'about {symbol}'}\nTECHNOLOGY_EXTENSION = ['TK']\n"
        "AUTOMOBILE_EXTENSION = ['AU']\nTRANSACTION_HISTORY_EXTENSION = [{'type': 'deposit', 'amount': 1.1, "
        "'timestamp': '2023-01-01 00:00:00.5'}]\nWATCH_LIST_EXTENSION = ['WA', 'WB', ...]\n"
        "CAR_STATUS_METADATA_EXTENSION = 'Make: Invented'\nINTERMEDIARY_CITIES = ['Midway']\n"
        "LONG_WEATHER_EXTENSION = {'-1_day': {'windSpeed': 1.5}}\nPARKING_BRAKE_INSTRUCTION = 'Pull it.'\n"
        "FILE_CONTENT_EXTENSION = ' More.'\nPOPULATE_FILE_EXTENSION = ['img_1.jpg', 'img_2.jpg']\n"
        "FILES_TAIL_USED = ['a.txt']\nCREDIT_CARD_EXTENSION = {'card_x': {'card_number': '9', 'balance': 5.0}}\n"
        "BOOKING_RECORD_EXTENSION = {'booking_x': {'card_id': 'card_x', 'travel_cost': 1.5}}\n")
    (src / "travel_booking.py").write_text(
        "import random\n\nDEFAULT_STATE = {'random_seed': 141053, 'credit_card_list': {}, 'booking_record': {}, "
        "'access_token': None, 'token_type': None, 'token_expires_in': None, 'token_scope': None, "
        "'user_first_name': None, 'user_last_name': None, 'budget_limit': None}\n\n\nclass TravelAPI:\n"
        "    def get_flight_cost(self, travel_from, travel_to, travel_date, travel_class):\n"
        "        base_costs = {('SFO', 'LAX'): 200, ('SFO', 'JFK'): 500, ('LAX', 'SFO'): 100}\n")
    (ev / "constants").mkdir()
    (ev / "constants" / "default_prompts.py").write_text(
        f"MAXIMUM_STEP_LIMIT = 20\nDEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC = (\n    {ADDED!r}\n)\n")
    return root


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("bfcl")
    checkout = fake_checkout(root / "gorilla")
    r = runner.invoke(app, ["import", "bfcl", str(checkout), "--dir", str(root / "project")], env=WIDE)
    assert r.exit_code == 0, r.output
    return root / "project", r.output


@pytest.fixture(scope="module")
def opened(project):
    from muactl.domain.validate import validate_domain

    old = os.getcwd()
    os.chdir(project[0])
    try:
        yield validate_domain("bfcl")  # every gold path replayed on a fresh sandbox
    finally:
        os.chdir(old)


def test_recorded_ground_truth_is_complete_and_small():
    t = json.loads((DATA / "truth.json").read_text())["entries"]
    assert len(t) == 800 and all(e["passes"] for e in t.values())  # BFCL's own check passes its gold, every entry
    assert {c: sum(e["category"] == c for e in t.values()) for c in ("base", "miss_func", "miss_param", "long_context")} \
        == dict.fromkeys(("base", "miss_func", "miss_param", "long_context"), 200)
    digests = [d for e in t.values() for turn in e["turns"] for d in [*turn["outputs"], turn["state"]]]
    assert len(digests) == 7961 and all(re.fullmatch(r"[0-9a-f]{16}", d) for d in digests)
    assert (DATA / "truth.json").stat().st_size < 600_000  # digests, not BFCL's data


def test_import_of_a_folder_that_is_not_bfcl_is_a_clear_error(tmp_path):
    r = runner.invoke(app, ["import", "bfcl", str(tmp_path), "--dir", str(tmp_path)])
    assert r.exit_code == 2 and "not a gorilla (BFCL) checkout" in r.output
    assert not (tmp_path / "domains").exists()


def test_the_import_lists_what_it_skipped_and_why(project):
    root, output = project
    assert re.search(r"base\s+8\s+8\s+0\s", output), output  # all eight classes have tools: nothing is left out
    assert json.loads((root / "tasks" / "bfcl" / "skipped.json").read_text()) == []
    r = runner.invoke(app, ["import", "bfcl", str(root.parent / "gorilla"), "--dir", str(root)])
    assert r.exit_code != 0 and "--force" in r.output  # an earlier import is not replaced silently


def test_entries_become_tasks_with_fixed_turns(opened):
    base = opened.task("multi_turn_base_0").task
    assert [t.message for t in base.turns] == ["Log me in (ana, pw) and buy 3 NOVA at 12.5.", "Put 100 in my account.",
                                               "Show my transactions."]
    assert base.turns[0].actions == [{"trading_login": {"username": "ana", "password": "pw"}},
                                     {"place_order": {"order_type": "Buy", "symbol": "NOVA", "price": 12.5, "amount": 3}}]
    assert "fund_account" in base.tools and "load_trading_bot" not in base.tools
    load = base.setup[0]["load_trading_bot"]
    assert load["state"]["random_seed"] == SEED and load["state"]["account_info"]["balance"] == 50.0  # defaults, overridden
    assert load["long_context"] is False
    missed = opened.task("multi_turn_miss_func_0").task
    assert missed.turns[2].message == ADDED and missed.turns[2].tools == ["fund_account"]
    assert missed.turns[1].actions == []
    long = opened.task("multi_turn_long_context_0").task
    assert long.turns[3].actions == [{"get_stock_info": {"symbol": "NOVA"}}]  # positional, named by the doc's order
    assert long.setup[0]["load_trading_bot"]["long_context"] is True


def replay(opened, task_id: str, calls: list[tuple[str, dict]]) -> list[str]:
    from muactl.env.sandbox import new_env

    env = new_env(opened.compiled)
    try:
        env.replay(opened.task(task_id).task.setup)
        return [env.call(n, a).content for n, a in calls]
    finally:
        env.close()


def test_the_tools_answer_as_bfcls_classes_print(opened):
    rng = random.Random(SEED)  # BFCL's draws: randint(start, start + 1 day) - start, in its call order
    stamps = [(datetime(2024, 9, 1, 10, 30) + timedelta(seconds=rng.randrange(86401))).strftime("%Y-%m-%d %H:%M:%S")
              for _ in range(2)]
    out = replay(opened, "multi_turn_base_0", [
        ("get_watchlist", {}), ("place_order", {"order_type": "Buy", "symbol": "NOVA", "price": 12.5, "amount": 3}),
        ("trading_login", {"username": "a", "password": "b"}), ("trading_login", {"username": "a", "password": "b"}),
        ("place_order", {"order_type": "buy", "symbol": "NOVA", "price": 20.005, "amount": 3}),
        ("place_order", {"order_type": "Buy", "symbol": "NOVA", "price": 12, "amount": 3}),
        ("get_order_details", {"order_id": 9}), ("cancel_order", {"order_id": 400}),
        ("fund_account", {"amount": 100}), ("withdraw_funds", {"amount": 0.1}),
        ("get_transaction_history", {}), ("get_stock_info", {"symbol": "ZZZ"}), ("get_order_history", {}),
        ("notify_price_change", {"stocks": ["NOVA", "ORBT", "NONE"], "threshold": 0.3}),
        ("filter_stocks_by_price", {"stocks": ["NOVA", "ORBT", "NONE"], "min_price": 0, "max_price": 50}),
        ("trading_get_login_status", {}), ("get_transaction_history", {"start_date": "2024/09/01"})])
    assert out == [
        "['Error: User not authenticated. Please log in to view the watchlist.']",
        '{"error": "User not authenticated. Please log in to place an order."}',
        '{"status": "Logged in successfully"}', '{"status": "Already logged in"}',
        '{"error": "Insufficient funds: required $60.02 but only $50.00 available."}',
        '{"order_id": 500, "order_type": "Buy", "status": "Pending", "price": 12.0, "amount": 3}',
        '{"error": "Order with ID 9 not found.Here is the list of orders_id: [400, 500]"}',
        '{"error": "Can\'t cancel order 400. Order is already completed."}',
        '{"status": "Account funded successfully", "new_balance": 150.0}',
        '{"status": "Withdrawal successful", "new_balance": 149.9}',
        '{"transaction_history": [{"type": "deposit", "amount": 100, "timestamp": "%s"}, {"type": "withdrawal", '
        '"amount": 0.1, "timestamp": "%s"}]}' % tuple(stamps),
        '{"error": "Stock with symbol \'ZZZ\' not found."}', '{"history": [400, 500]}',
        '{"notification": "Stocks NOVA have significant price changes."}',
        '{"filtered_stocks": ["NOVA", "NONE"]}',  # an unknown symbol's price is 0, within [0, 50]
        '{"status": true}',
        "Error during execution: time data '2024/09/01' does not match format '%Y-%m-%d'"]
    assert f"{60.015:.2f}" == "60.02" and f"{150.0 - 0.1}" == "149.9"


def test_message_api_answers_as_bfcl_prints_with_its_own_random_stream(opened):
    rng = random.Random(MESSAGE_SEED)  # randint(10000, 99999): 10000 + randrange(90000), in call order
    first, second = (10000 + rng.randrange(90000) for _ in range(2))
    out = replay(opened, "multi_turn_base_2", [
        ("send_message", {"receiver_id": "USR002", "message": "x"}), ("message_login", {"user_id": "USR009"}),
        ("message_login", {"user_id": "USR001"}), ("send_message", {"receiver_id": "USR002", "message": "Hi Bo"}),
        ("send_message", {"receiver_id": "USR002", "message": "Hi Bo"}), ("view_messages_sent", {}),
        ("delete_message", {"receiver_id": "USR002"}), ("search_messages", {"keyword": "HELLO"}),
        ("add_contact", {"user_name": "Cy"}), ("add_contact", {"user_name": "Cy"}), ("get_message_stats", {}),
        ("get_user_id", {"user": "Zed"})])
    assert out == [
        '{"error": "No user is currently logged in."}',
        '{"login_status": false, "message": "User ID \'USR009\' not found."}',
        '{"login_status": true, "message": "User \'USR001\' logged in successfully."}',
        '{"sent_status": true, "message_id": {"new_id": %d}, "message": "Message sent to \'USR002\' successfully."}' % first,
        '{"sent_status": true, "message_id": {"new_id": %d}, "message": "Message sent to \'USR002\' successfully."}' % second,
        '{"messages": {"USR001": ["hello there"], "USR002": ["Hi Bo", "Hi Bo"]}}',
        '{"deleted_status": true, "receiver_id": "USR002", "message": "Receiver USR002\'s latest message deleted '
        'successfully."}',
        '{"results": [{"receiver_id": "USR001", "message": "hello there"}]}',
        # user_count (1) goes up to 2 before USR002 is found taken, so the next try gets USR003
        '{"error": "User ID \'USR002\' already exists."}',
        '{"added_status": true, "user_id": "USR003", "message": "Contact \'Cy\' added successfully."}',
        '{"stats": {"received_count": 2, "total_contacts": 2}}',
        '{"error": "User \'Zed\' not found in the workspace."}']


def test_ticket_api_answers_as_bfcl_prints(opened):
    out = replay(opened, "multi_turn_base_3", [
        ("create_ticket", {"title": "x"}), ("ticket_login", {"username": "Ana", "password": ""}),
        ("ticket_login", {"username": "Ana", "password": "pw"}), ("create_ticket", {"title": "Broken", "priority": 9}),
        ("create_ticket", {"title": "Broken", "priority": 2}), ("get_ticket", {"ticket_id": 99}),
        ("close_ticket", {"ticket_id": 3}), ("close_ticket", {"ticket_id": 3}),
        ("edit_ticket", {"ticket_id": 4, "updates": {"owner": "Bo"}}),
        ("edit_ticket", {"ticket_id": 4, "updates": {"priority": 5, "title": None}}),
        ("get_user_tickets", {"status": "open"}), ("logout", {}), ("logout", {})])
    assert out == [
        '{"error": "User not authenticated. Please log in to create a ticket."}', '{"success": false}',
        '{"success": true}', '{"error": "Invalid priority. Priority must be between 1 and 5."}',
        '{"id": 4, "title": "Broken", "description": "", "status": "Open", "priority": 2, "created_by": "Ana"}',
        '{"error": "Ticket with ID 99 not found."}', '{"status": "Ticket 3 has been closed successfully."}',
        '{"error": "Ticket with ID 3 is already closed."}', '{"error": "Invalid fields for update: owner"}',
        '{"status": "Ticket 4 has been updated successfully."}',
        # a list, so str(): Python's reprs; the None title left the title alone
        "[{'id': 4, 'title': 'Broken', 'description': '', 'status': 'Open', 'priority': 5, 'created_by': 'Ana'}]",
        '{"success": true}', '{"success": false}']


def test_a_ticket_id_may_be_a_number_or_a_string_as_in_bfcls_gold(opened):
    out = replay(opened, "multi_turn_base_3", [("get_ticket", {"ticket_id": "ticket_3"}), ("get_ticket", {"ticket_id": 3}),
                                               ("get_ticket", {"ticket_id": True})])
    assert out[:2] == ['{"error": "Ticket with ID ticket_3 not found."}',
                       '{"id": 3, "title": "Old", "status": "Open", "created_by": "Ana"}']
    assert "True is not of type ['integer', 'string']" in out[2]  # a param's type list ([integer, string]) is JSON Schema's


def test_twitter_api_answers_as_bfcl_prints(opened):
    out = replay(opened, "multi_turn_base_4", [
        ("post_tweet", {"content": "x"}), ("authenticate_twitter", {"username": "ana", "password": "no"}),
        ("authenticate_twitter", {"username": "ana", "password": "pw"}),
        ("post_tweet", {"content": "Hello news", "tags": ["#n"]}), ("mention", {"tweet_id": 1, "mentioned_usernames": ["@bo"]}),
        ("retweet", {"tweet_id": 0}), ("retweet", {"tweet_id": 0}), ("retweet", {"tweet_id": 7}),
        ("comment", {"tweet_id": 0, "comment_content": "nice"}), ("get_tweet_comments", {"tweet_id": 0}),
        ("search_tweets", {"keyword": "NEWS"}), ("follow_user", {"username_to_follow": "bo"}),
        ("unfollow_user", {"username_to_unfollow": "bo"}), ("get_user_stats", {"username": "ana"})])
    assert out == [
        '{"error": "User not authenticated. Please authenticate before posting."}', '{"authentication_status": false}',
        '{"authentication_status": true}',
        '{"id": 1, "username": "ana", "content": "Hello news", "tags": ["#n"], "mentions": []}',
        '{"mention_status": "Users mentioned successfully"}', '{"retweet_status": "Successfully retweeted"}',
        '{"retweet_status": "Already retweeted"}', '{"error": "Tweet with ID 7 not found."}',
        '{"comment_status": "Comment added successfully"}',
        # comments loaded keyed "0"; comment() adds the int key 0, which is the one get_tweet_comments finds
        "[{'username': 'ana', 'content': 'nice'}]",
        "[{'id': 0, 'username': 'cy', 'content': 'Old News', 'tags': ['#x'], 'mentions': []}, "
        "{'id': 1, 'username': 'ana', 'content': 'Hello news', 'tags': ['#n'], 'mentions': ['@bo']}]",
        '{"follow_status": false}', '{"unfollow_status": true}',
        '{"tweet_count": 1, "following_count": 0, "retweet_count": 1}']


def test_vehicle_control_answers_as_bfcl_prints(opened):
    rng = random.Random(VEHICLE_SEED)  # uniform(a, b): a + (b - a) * random(), in call order
    speed, outside = 0.0 + 120.0 * rng.random(), -10.0 + 50.0 * rng.random()
    out = replay(opened, "multi_turn_base_5", [
        ("lockDoors", {"unlock": False, "door": ["driver", "boot", "passenger"]}), ("startEngine", {"ignitionMode": "START"}),
        ("pressBrakePedal", {"pedalPosition": 0.5}), ("startEngine", {"ignitionMode": "START"}),
        ("pressBrakePedal", {"pedalPosition": 1}), ("startEngine", {"ignitionMode": "START"}),
        ("fillFuelTank", {"fuelAmount": 45}), ("fillFuelTank", {"fuelAmount": 2.25}),
        ("get_current_speed", {}), ("get_outside_temperature_from_google", {}),
        ("adjustClimateControl", {"temperature": 70, "unit": "fahrenheit"}), ("displayCarStatus", {"option": "climate"}),
        ("setCruiseControl", {"speed": 62, "activate": True, "distanceToNextVehicle": 40}),
        ("estimate_distance", {"cityA": "74532", "cityB": "83214"}), ("liter_to_gallon", {"liter": 3})])
    assert out == [
        "Error during execution: 'boot'",  # the driver's door locked before the unknown one raised
        '{"error": "Brake pedal needs to be pressed when starting the engine."}',
        '{"brakePedalStatus": "pressed", "brakePedalForce": 500.0}',
        '{"error": "Must press the brake fully before starting the engine."}',
        '{"brakePedalStatus": "pressed", "brakePedalForce": 1000.0}',
        '{"engineState": "running", "fuelLevel": 10.5, "batteryVoltage": 12.6}',
        '{"error": "Cannot fill gas above the tank capacity."}', '{"fuelLevel": 12.75}',
        '{"currentSpeed": %r}' % speed, '{"outsideTemperature": %r}' % outside,
        '{"currentACTemperature": 70, "climateMode": "auto", "humidityLevel": 50.0}',
        '{"currentACTemperature": %r, "fanSpeed": 50, "climateMode": "auto", "humidityLevel": 50.0}' % ((70 - 32) * 5 / 9),
        '{"error": "Invalid speed"}', '{"distance": 750.0}',  # 62 is not a multiple of 5
        '{"gallon": %r}' % (3 * 0.264172)]


def test_math_api_answers_as_bfcl_prints(opened):
    calls = [("logarithm", {"value": 630.0, "base": 10, "precision": 5}), ("logarithm", {"value": -5, "base": 10, "precision": 8}),
             ("logarithm", {"value": 10, "base": 1, "precision": 5}), ("mean", {"numbers": [5000, 3000, 2000]}),
             ("mean", {"numbers": []}), ("standard_deviation", {"numbers": [100, 95, 85, 90, 88, 92]}),
             ("si_unit_conversion", {"value": 3, "unit_in": "um", "unit_out": "km"}),
             ("si_unit_conversion", {"value": 3, "unit_in": "km", "unit_out": "mile"}),
             ("imperial_si_conversion", {"value": 100, "unit_in": "fahrenheit", "unit_out": "celsius"}),
             ("imperial_si_conversion", {"value": 7, "unit_in": "lb", "unit_out": "lb"}),
             ("add", {"a": 2, "b": 3}), ("add", {"a": 0.1, "b": 0.2}), ("divide", {"a": 1, "b": 0}),
             ("divide", {"a": 10, "b": 4}), ("power", {"base": 2, "exponent": 70}),
             ("power", {"base": -8, "exponent": 1 / 3}), ("power", {"base": 0, "exponent": -1}),
             ("power", {"base": 10.0, "exponent": 400}), ("square_root", {"number": 2, "precision": 12}),
             ("square_root", {"number": 2, "precision": 0}), ("round_number", {"number": 2.675, "decimal_places": 2}),
             ("round_number", {"number": 12350, "decimal_places": -2}), ("round_number", {"number": 2.5}),
             ("percentage", {"part": 1, "whole": 3}), ("min_value", {"numbers": [1, 1.0, 3]}),
             ("max_value", {"numbers": [2.0, 2]}), ("sum_values", {"numbers": [0.1, 0.2, 0.3]}),
             ("absolute_value", {"number": -4})]
    assert replay(opened, "multi_turn_base_1", calls) == [
        # mpmath's mpf (and mpc, for a negative value) and decimal's Decimal fail json.dumps: str() of the dict
        "{'result': mpf('2.7993393')}", "{'result': mpc(real='0.69897000492', imag='1.364376355')}",
        '{"error": ""}',  # mpmath's ZeroDivisionError says nothing
        '{"result": 3333.3333333333335}', '{"error": "Cannot calculate mean of an empty list"}',
        '{"result": 4.85340659285368}', '{"result": 3e-09}',
        '{"error": "Conversion from \'km\' to \'mile\' is not supported"}', '{"result": 37.77777777777778}',
        '{"result": 7}', '{"result": 5}', '{"result": 0.30000000000000004}', '{"error": "Cannot divide by zero"}',
        '{"result": 2.5}', '{"result": 1180591620717411303424}',
        "{'result': (1.0000000000000002+1.7320508075688772j)}",
        "Error during execution: 0.0 cannot be raised to a negative power",
        "Error during execution: (34, 'Numerical result out of range')", "{'result': Decimal('1.41421356237')}",
        "Error during execution: valid range for prec is [1, MAX_PREC]",
        '{"result": 2.67}', '{"result": 12400}', '{"result": 2.0}', '{"result": 33.33333333333333}',
        '{"result": 1}', '{"result": 2.0}',  # the first of equal values, int or float
        '{"result": 0.6000000000000001}', '{"result": 4}']


def test_math_precision_and_powers_are_bounded(opened):
    out = replay(opened, "multi_turn_base_1", [("logarithm", {"value": 2, "base": 3, "precision": 10 ** 9}),
                                              ("square_root", {"number": 2, "precision": 10 ** 9}),
                                              ("power", {"base": 10, "exponent": 10 ** 12})])
    assert out == ['{"error": "muactl computes at most 1000 digits"}'] * 2 + [
        '{"error": "muactl writes integers of at most 10000 bits"}']


def test_travel_api_answers_as_bfcl_prints_with_one_stream_for_every_id(opened):
    rng = random.Random(TRAVEL_SEED)  # one stream, drawn from a different range for each kind of id, in call order
    token, card, balance, booking, transaction, insurance = (
        str(rng.randint(100000, 999999)), str(rng.randint(100000000000, 999999999999)), rng.randint(10000, 99999),
        str(rng.randint(1000000, 9999999)), str(rng.randint(10000000, 99999999)), str(rng.randint(100000000, 999999999)))
    flight = {"access_token": token, "card_id": "card_1", "travel_date": "2024-11-15", "travel_from": "SFO",
              "travel_to": "JFK", "travel_class": "economy"}
    out = replay(opened, "multi_turn_base_6", [
        ("get_flight_cost", {"travel_from": "SFO", "travel_to": "LAX", "travel_date": "2024-11-15", "travel_class": "business"}),
        ("get_flight_cost", {"travel_from": "SFO", "travel_to": "XXX", "travel_date": "2024-11-15", "travel_class": "business"}),
        ("register_credit_card", {"access_token": "x", "card_number": "5", "expiration_date": "1/30", "cardholder_name": "A",
                                  "card_verification_number": 1}),
        ("authenticate_travel", {"client_id": "c", "client_secret": "s", "refresh_token": "r", "grant_type": "read_write",
                                 "user_first_name": "Ana", "user_last_name": "Li"}),
        ("register_credit_card", {"access_token": token, "card_number": "5500", "expiration_date": "1/30",
                                  "cardholder_name": "Ana Li", "card_verification_number": 7}),
        ("book_flight", flight), ("book_flight", {**flight, "travel_date": "2024-02-30"}),
        ("book_flight", {**flight, "travel_date": "2024-11-16", "travel_to": "LAX"}),
        ("retrieve_invoice", {"access_token": token, "booking_id": booking}),
        ("purchase_insurance", {"access_token": token, "insurance_type": "full", "booking_id": booking, "insurance_cost": 50,
                                "card_id": "card_1"}),
        ("get_credit_card_balance", {"access_token": token, "card_id": "card_1"}),
        ("get_credit_card_balance", {"access_token": token, "card_id": "card_9"}),
        ("cancel_booking", {"access_token": token, "booking_id": booking}),
        ("compute_exchange_rate", {"base_currency": "EUR", "target_currency": "USD", "value": 100}),
        ("set_budget_limit", {"access_token": token, "budget_limit": 2000}),
        ("book_flight", {**flight, "travel_to": "LAX"}),
        ("verify_traveler_information", {"first_name": "Bo", "last_name": "Li", "date_of_birth": "1990-05-05",
                                         "passport_number": "US1"}),
        ("get_all_credit_cards", {})])
    assert out == [
        '{"travel_cost_list": [800.0]}',  # business (x2) on a date whose digits add up to an even number (x2)
        "Error during execution: No available route for the given airports.", '{"error": "Token not initialized"}',
        '{"expires_in": 2, "access_token": "%s", "token_type": "Bearer", "scope": "read_write"}' % token,
        '{"card_id": "%s"}' % card,
        '{"booking_id": "%s", "transaction_id": "%s", "booking_status": true, "booking_history": {}}' % (booking, transaction),
        '{"booking_status": false, "error": "Invalid date format. Use YYYY-MM-DD."}',  # no 30 February
        '{"booking_status": false, "error": "Insufficient funds"}',
        '{"invoice": {"booking_id": "%s", "travel_date": "2024-11-15", "travel_from": "SFO", "travel_to": "JFK", '
        '"travel_class": "economy", "travel_cost": 1000.0, "transaction_id": "%s"}}' % (booking, transaction),
        '{"insurance_id": "%s", "insurance_status": true}' % insurance, '{"card_balance": -50.0}',
        '{"error": "Card not registered. Here are a list of card_id\'s: [\'card_1\', \'%s\']"}' % card,
        '{"cancel_status": true}', '{"exchanged_value": 125.0}', '{"budget_limit": 2000.0}',
        '{"booking_status": false, "error": "Balance is less than budget limit"}',
        '{"verification_status": false, "verification_failure": "Cannot book flight information for another user.'
        'Expected Ana Li, got Bo Li"}',
        '{"credit_card_list": {"card_1": {"card_number": "4111", "expiration_date": "12/30", "cardholder_name": "Ana Li", '
        '"card_verification_number": 123, "balance": 950.0}, "%s": {"card_number": "5500", "expiration_date": "1/30", '
        '"cardholder_name": "Ana Li", "card_verification_number": 7, "balance": %d}}}' % (card, balance)]


def test_file_system_answers_as_bfcl_prints(opened):
    calls = [("pwd", {}), ("ls", {"a": True}), ("cd", {"folder": "docs/sub"}), ("cd", {"folder": "docs/"}), ("pwd", {}),
             ("cat", {"file_name": "a.txt"}), ("sort", {"file_name": "a.txt"}), ("wc", {"file_name": "a.txt", "mode": "w"}),
             ("tail", {"file_name": "a.txt", "lines": 2}), ("grep", {"file_name": "a.txt", "pattern": "line"}),
             ("cat", {"file_name": "sub"}), ("cd", {"folder": ".."}), ("cd", {"folder": ".."}), ("mkdir", {"dir_name": "bin"}),
             ("touch", {"file_name": "bin"}), ("touch", {"file_name": "a|b"}), ("cp", {"source": "docs", "destination": "copy"}),
             ("cd", {"folder": "copy"}), ("echo", {"content": "new", "file_name": "a.txt"}), ("cd", {"folder": ".."}),
             ("cd", {"folder": "docs"}), ("cat", {"file_name": "a.txt"}), ("cd", {"folder": ".."}),
             ("mv", {"source": "docs", "destination": "bin"}), ("cd", {"folder": "bin"}), ("cd", {"folder": "docs"}),
             ("cd", {"folder": "sub"}), ("pwd", {}), ("cd", {"folder": "/"}), ("find", {"path": "/", "name": "a"}),
             ("find", {"path": "bin/docs"}), ("du", {}), ("du", {"human_readable": True}),
             ("diff", {"file_name1": "notes.txt", "file_name2": "copy"}), ("rmdir", {"dir_name": "bin"}),
             ("rm", {"file_name": "bin"}), ("ls", {}), ("echo", {"content": "hi"}),
             ("cp", {"source": "notes.txt", "destination": "copy"}), ("cp", {"source": "notes.txt", "destination": "copy"}),
             ("mv", {"source": "x", "destination": "y"}), ("mv", {"source": "copy", "destination": "a/b"})]
    assert replay(opened, "multi_turn_base_7", calls) == [
        '{"current_working_directory": "/ana"}', '{"current_directory_content": ["docs", "notes.txt"]}',
        '{"error": "cd: docs/sub: Unsupported path. Only one folder level at a time is supported."}',
        '{"current_working_directory": "docs"}', '{"current_working_directory": "/ana/docs"}',
        '{"file_content": "b line\\na line\\nc"}', '{"sorted_content": "a line\\nb line\\nc"}',
        '{"count": 5, "type": "words"}', '{"last_lines": "a line\\nc"}', '{"matching_lines": ["b line", "a line"]}',
        '{"error": "cat: \'sub\': Is a directory"}', '{}',
        '{"error": "Current directory is already the root. Cannot go back."}', 'None',
        '{"error": "touch: cannot touch \'bin\': File exists"}', '{"error": "touch: cannot touch \'a|b\': Invalid character"}',
        '{"result": "\'docs\' copied to \'copy\'"}', '{"current_working_directory": "copy"}', 'None', '{}',
        '{"current_working_directory": "docs"}',
        '{"file_content": "new"}',  # cp copied the dict, not the files in it: one a.txt, written through copy/
        '{}', '{"result": "\'docs\' moved to \'bin/docs\'"}', '{"current_working_directory": "bin"}',
        '{"current_working_directory": "docs"}', '{"current_working_directory": "sub"}',
        '{"current_working_directory": "/ana/docs/sub"}',  # sub's parent is still the docs object mv left behind
        '{"current_working_directory": "ana"}', '{"matches": ["/bin/docs/a.txt", "/copy/a.txt"]}',
        '{"matches": ["bin/docs/a.txt", "bin/docs/sub"]}', '{"disk_usage": "19 bytes"}', '{"disk_usage": "19.00 B"}',
        '{"error": "diff: notes.txt or copy: No such file or directory"}',
        '{"error": "rmdir: cannot remove \'bin\': Directory not empty"}', '{"result": "\'bin\' removed"}',
        '{"current_directory_content": ["notes.txt", "copy"]}', '{"terminal_output": "hi"}',
        '{"result": "\'notes.txt\' copied to \'copy/notes.txt\'"}',
        "Error during execution: File 'notes.txt' already exists in directory 'copy'.",
        '{"error": "mv: cannot move \'x\': No such file or directory"}',
        '{"error": "mv: path not allowed in destination. Provide only a file or directory name."}']


def test_file_system_state_is_the_tree_bfcl_compares(opened):
    from muactl.episode.agents.base import Agent, AgentReply

    class Roundabout(Agent):  # a scratch file made and removed, then the gold's work: the same tree, other objects
        async def act(self, ctx):
            if ctx.messages[-1]["role"] != "user":
                return AgentReply("Done.")
            return AgentReply("", [{"name": "touch", "arguments": {"file_name": "tmp"}},
                                   {"name": "rm", "arguments": {"file_name": "tmp"}},
                                   {"name": "cd", "arguments": {"folder": "docs"}},
                                   {"name": "touch", "arguments": {"file_name": "b.txt"}}])

    ep = episode(opened, "multi_turn_base_7", Roundabout())
    assert ep.reward == 1.0 and ep.breakdown["turns"][0]["state"], ep.breakdown


def test_long_context_files_get_bfcls_extra_content_and_files(opened):
    out = replay(opened, "multi_turn_long_context_7", [("cat", {"file_name": "notes.txt"}), ("cd", {"folder": "docs"}),
                                                      ("cat", {"file_name": "a.txt"}), ("cd", {"folder": "sub"}), ("ls", {})])
    assert out == ['{"file_content": "b line\\nx line More."}', '{"current_working_directory": "docs"}',
                   '{"file_content": "b line\\na line\\nc"}',  # FILES_TAIL_USED: left as it is
                   '{"current_working_directory": "sub"}',
                   '{"current_directory_content": ["img_1.jpg", "img_2.jpg"]}']  # a directory with no subdirectory


def test_a_function_bfcls_gold_calls_before_it_is_added_is_shown_then(project, opened):
    root, output = project
    task = opened.task("multi_turn_miss_func_7").task
    assert task.turns[0].tools == ["cat"] and task.turns[1].message == ADDED and not task.turns[1].tools
    repaired = json.loads((root / "tasks" / "bfcl" / "repaired.json").read_text())
    assert repaired == [{"id": "multi_turn_miss_func_7", "category": "miss_func",
                         "why": "gold calls cat at turn 0, held out until turn 1: shown from turn 0"}]
    assert "repaired (its gold calls a held-out function before it is shown" in output
    from muactl.episode.agents.oracle import OracleAgent

    ep = episode(opened, "multi_turn_miss_func_7", OracleAgent())
    assert ep.reward == 1.0, (ep.breakdown, [m for m in ep.messages if m["role"] == "tool"])


def test_long_context_answers_with_bfcls_extra_data(opened):
    out = replay(opened, "multi_turn_long_context_0", [
        ("trading_login", {"username": "a", "password": "b"}), ("get_stock_info", {"symbol": "NOVA"}),
        ("get_watchlist", {}), ("get_available_stocks", {"sector": "Technology"}),
        ("get_order_details", {"order_id": 400})])
    assert out[1:] == [
        '{"price": 12.25, "percent_change": -0.31, "volume": 1.5, "MA(5)": [1.5, 2.25], "MA(20)": [3.125]}',
        "['ORBT', 'WA', 'WB', Ellipsis]",  # str() of watch_list + WATCH_LIST_EXTENSION, which ends in ...
        '{"stock_list": ["AAPL", "GOOG", "MSFT", "NVDA", "TK"]}',
        '{"id": 400, "order_type": "Sell", "symbol": "ORBT", "price": 98.5, "amount": 2, "status": "Completed", '
        '"metadata": {"note": "about ORBT"}}']


def episode(opened, task_id, agent):
    from muactl.episode.rollout import RolloutConfig, run_episode
    from muactl.episode.user import ScriptedUser

    return asyncio.run(run_episode(opened.task(task_id), opened.compiled, agent, ScriptedUser(), RolloutConfig()))


@pytest.mark.parametrize("category", ["base", "miss_func", "miss_param", "long_context"])
def test_the_oracle_passes_by_bfcls_rule(opened, category):
    from muactl.episode.agents.oracle import OracleAgent

    ep = episode(opened, f"multi_turn_{category}_0", OracleAgent())
    assert ep.termination == "agent_done" and ep.reward == 1.0, ep.breakdown
    assert all(t["ok"] for t in ep.breakdown["turns"]) and ep.breakdown["turns"]


def test_an_agent_that_skips_a_turns_work_fails_that_turns_checks(opened):
    from muactl.episode.agents.base import Agent, AgentReply

    class LateAgent(Agent):  # logs in and buys, but only when asked for the deposit; never deposits
        async def act(self, ctx):
            turn = sum(m["role"] == "user" for m in ctx.messages)
            if turn == 2 and ctx.messages[-1]["role"] == "user":
                return AgentReply("", [{"name": "trading_login", "arguments": {"username": "ana", "password": "pw"}},
                                       {"name": "place_order", "arguments": {"order_type": "Buy", "symbol": "NOVA",
                                                                             "price": 12.5, "amount": 3}}])
            return AgentReply("Done.")

    ep = episode(opened, "multi_turn_base_0", LateAgent())
    assert ep.termination == "agent_done" and ep.reward == 0.0
    first, second, third = ep.breakdown["turns"]
    assert not first["called"] and not first["state"] and not first["ok"]
    assert not second["state"] and not second["response"]  # no deposit: balance and history differ
    assert not third["ok"]


def test_a_held_out_function_appears_with_bfcls_message(opened):
    from muactl.episode.agents.base import Agent, AgentReply

    seen = []

    class Looks(Agent):
        async def act(self, ctx):
            seen.append(({t["function"]["name"] for t in ctx.tools}, ctx.messages[-1].get("content")))
            return AgentReply("Done.")

    episode(opened, "multi_turn_miss_func_0", Looks())
    assert ["fund_account" in names for names, _ in seen] == [False, False, True, True]
    assert seen[2][1] == ADDED


def test_the_scratch_answer_row_is_not_state(opened):
    from muactl.env.sandbox import new_env

    task = opened.task("multi_turn_base_0").task
    env = new_env(opened.compiled)
    try:
        env.replay(task.setup)
        before = env.state_hash()
        refused = env.call("place_order", {"order_type": "Buy", "symbol": "NOVA", "price": 1, "amount": 1})
        assert "not authenticated" in refused.content and env.state_hash() == before  # only the scratch row changed
        assert env.state_hash() == env.full_state_hash()
    finally:
        env.close()
    env = new_env(opened.compiled)  # a reused sandbox: the scratch row is back to its template value too
    try:
        assert env.call("bfcl_state", {"classes": []}).content == "{}"
        assert env.conn.execute("SELECT text FROM outcome").fetchone() == (None,)
    finally:
        env.close()


def test_a_malformed_entry_file_names_file_and_line(tmp_path):
    checkout = fake_checkout(tmp_path / "gorilla")
    path = checkout / "berkeley-function-call-leaderboard" / "bfcl_eval" / "data" / "BFCL_v4_multi_turn_base.json"
    path.write_text(path.read_text() + '{"id": "x", "question": [}\n')
    r = runner.invoke(app, ["import", "bfcl", str(checkout), "--dir", str(tmp_path / "p")])
    assert r.exit_code == 2 and "BFCL_v4_multi_turn_base.json:9" in r.output, r.output
    assert not (tmp_path / "p" / "domains").exists()


def test_checkout_code_is_read_never_run(tmp_path):
    checkout = fake_checkout(tmp_path / "gorilla")
    src = checkout / "berkeley-function-call-leaderboard" / "bfcl_eval" / "eval_checker" / "multi_turn_eval" / \
        "func_source_code" / "trading_bot.py"
    marker = tmp_path / "ran"
    src.write_text(f"open({str(marker)!r}, 'w')\nDEFAULT_STATE = dict(orders={{}})\n")
    r = runner.invoke(app, ["import", "bfcl", str(checkout), "--dir", str(tmp_path / "p")])
    assert r.exit_code == 2 and "DEFAULT_STATE is not a literal" in r.output and not marker.exists()


@pytest.mark.slow
@pytest.mark.skipif(not CHECKOUT, reason="set BFCL to a gorilla checkout to import its data")
def test_import_matches_bfcls_own_classes():
    from benchmarks.bfcl_verify import run

    rows = run(Path(CHECKOUT).resolve())
    assert [r["entries"] for r in rows] == [200] * 4
    for r in rows:
        assert r["imported"] + r["skipped"] == r["entries"] and r["imported"] > 0
        assert r["same_output"] == r["calls"] > 0 and r["same_state"] == r["turns"] > 0, r["mismatches"][:5]
        assert r["bfcl_passes"] == r["compared"] == r["imported"] and r["oracle"] == 1.0
