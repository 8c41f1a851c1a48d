"""ACEBench Agent facts both sides share: how a gold call string is read and repaired, the state ACEBench
scores, and the digests of the recorded ground truth.

`benchmarks/acebench_record.py` runs ACEBench's own classes (its code, offline) on every task's
milestones and writes tests/data/acebench/<language>.json: per gold call a digest of its output bytes,
per task a digest of the final state ACEBench scores and ACEBench's own verdict on it. muactl's import
(importers/acebench.py) reads the same milestones with `parse_calls` and makes the same repairs, so
both sides replay the same calls. Plain standard library: the recorder runs under ACEBench's checkout,
the verifier under muactl.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from typing import Any

from ..errors import CallUnreadable

# the attributes of each class ACEBench saves after an episode and scores against ground_truth
# (SAVED_CLASS in its model_inference/apimodel_inference.py)
SAVED = {"BaseApi": ["wifi", "logged_in"], "MessageApi": ["inbox"], "ReminderApi": ["reminder_list"],
         "FoodPlatform": ["users", "logged_in_users", "orders"], "Travel": ["users", "reservations"]}
# a device action refused because the device is not logged in (the precondition a milestone list may omit)
NOT_LOGGED_IN = {"en": "Device not logged in", "zh": "device未登录"}
LOGIN = "[login_device()]"


def digest(text: str) -> str:
    """A short digest of an output's exact bytes."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def state_text(result_list: list[dict]) -> str:
    """The final state as ACEBench stores it (its result file, json.dumps), whose bytes are compared."""
    return json.dumps(result_list)


# ---------------------------------------------------------------- reading gold call strings


def parse_calls(text: str) -> list[tuple[str, dict[str, Any]]]:
    """`[name(k='v', ...), ...]` as (name, args) pairs: keyword arguments of constants, lists, dicts and
    tuples only (nothing is evaluated). The text is prepared as ACEBench prepares it, so this fails
    (CallUnreadable) where ACEBench's parser fails: a space after the closing bracket, an unescaped apostrophe."""
    func = text[1:] if text[:1] == " " else text  # ACEBench's own steps before it parses (decode_function_list)
    func = func if func.startswith("[") else "[" + func
    func = func if func.endswith("]") else func + "]"
    body = func.strip("[]'")
    try:
        tree = ast.parse(body, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise CallUnreadable(f"not a call list: {getattr(e, 'msg', e)}") from None
    calls = tree.elts if isinstance(tree, (ast.Tuple, ast.List)) else [tree]
    out = []
    for call in calls:
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name) or call.args:
            raise CallUnreadable("each item must be name(key=value, ...)")
        out.append((call.func.id, {k.arg: literal(k.value) for k in call.keywords}))
    return out


def literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and node.value is not Ellipsis:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
            and type(node.operand.value) in (int, float):
        return -node.operand.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [literal(v) for v in node.elts]
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {literal(k): literal(v) for k, v in zip(node.keys, node.values)}
    raise CallUnreadable(f"an argument muactl does not read: {type(node).__name__}")


def repaired_text(text: str) -> str:
    """A gold call string with its parsing artefacts mended, where the mending is unambiguous: spaces
    around the brackets, and apostrophes inside a single-quoted argument (Domino's), escaped. A quote
    closes a string only before `,` `)` `]` `}` `:` or the end; any other is an apostrophe."""
    out = text.strip()
    if "'" not in out:
        return out
    chars, inside, double = [], False, False
    for i, ch in enumerate(out):
        escaped = i > 0 and out[i - 1] == "\\"
        if ch == '"' and not inside and not escaped:
            double = not double
        elif ch == "'" and not double and not escaped:
            if not inside:
                inside = True
            else:
                rest = out[i + 1:].lstrip(" ")
                if rest[:1] in ("", ",", ")", "]", "}", ":"):
                    inside = False
                else:
                    chars.append("\\'")
                    continue
        chars.append(ch)
    return "".join(chars)


def is_login_refusal(output: str, language: str) -> bool:
    return NOT_LOGGED_IN[language] in output and '"status": false' in output


def milestone_paths(mile_stone: list) -> list[list[str]]:
    """ACEBench's mile_stone: one list of call strings, or several alternatives (lists of them)."""
    if mile_stone and isinstance(mile_stone[0], list):
        return [list(p) for p in mile_stone]
    return [list(mile_stone)]


def ground_truth_list(ground_truth: Any) -> list[dict]:
    return ground_truth if isinstance(ground_truth, list) else [ground_truth]


def misspelt_classes(ground_truth: list[dict], involved: list[str]) -> list[str]:
    """Classes ground_truth names that the task does not involve (ReminderAPI for ReminderApi): ACEBench's
    checker finds no state for them and skips them without a word."""
    return [name for entry in ground_truth for name in entry if name not in involved]


# what ACEBench's checker says of a state (model_eval/checker.py agent_checker, eval_main.py agent_eval),
# the rule muactl's acebench_check tool computes in SQL
def acebench_verdict(result_list: list[dict], ground_truth: list[dict]) -> tuple[bool, list[str]]:
    if len(ground_truth) != len(result_list):
        return False, ["wrong number of class"]
    errors: list[str] = []
    for entry in ground_truth:
        name, want = next(iter(entry.items()))
        got = next((next(iter(m.values())) for m in result_list if set(m) == {name}), None)
        if got is None:
            continue
        for attr, value in got.items():
            if attr not in want:
                errors.append(f"{name}.{attr} missing in ground_truth")
            elif isinstance(want[attr], dict):
                for key, v in want[attr].items():
                    if key not in value or v != value[key]:
                        errors.append(f"{name}.{attr}.{key} differs")
            elif want[attr] != value:
                errors.append(f"{name}.{attr} differs")
    return not errors, errors


def strict_verdict(result_list: list[dict], ground_truth: list[dict]) -> tuple[bool, list[str]]:
    """muactl's strict rule (acebench_check strict): one entry per class, every class ground_truth names
    is the task's, with every saved attribute equal whole (extra keys count)."""
    if len(ground_truth) != len(result_list):
        return False, ["wrong number of class"]
    state = {k: v for entry in result_list for k, v in entry.items()}
    errors = [f"{name}: not the task's class name" if name not in state else f"{name} differs (strict)"
              for entry in ground_truth for name, want in entry.items() if state.get(name) != want]
    return not errors, errors


def task_number(task_id: str) -> int:
    m = re.search(r"(\d+)$", task_id)
    return int(m[1]) if m else -1


# Calls off the gold paths, run in order after every task's setup, each on the state the ones before
# left (so they reach the refusals: unknown users, wrong passwords, a full inbox, a message without a
# time, a missing login or Wi-Fi, a class the task does not involve); recorded per call as an output digest.
PROBES: dict[str, list[str]] = {"phone": [
    "[get_latest_message_id()]", "[get_earliest_message_id()]", "[get_all_message_times_with_ids()]",
    "[view_messages_between_users(sender_name='Eve', receiver_name='Frank')]",
    "[view_messages_between_users(sender_name='Frank', receiver_name='Eve')]",
    "[view_messages_between_users(sender_name='Nobody', receiver_name='Frank')]",
    "[view_messages_between_users(sender_name='Eve', receiver_name='Nobody')]",
    "[search_messages(user_name='Eve', keyword='MEETING')]", "[search_messages(user_name='Helen', keyword='')]",
    "[search_messages(user_name='Eve', keyword='zzz')]", "[search_messages(user_name='Zed', keyword='a')]",
    "[send_message(sender_name='Eve', receiver_name='Zed', message='hi')]",
    "[delete_message(message_id=99)]", "[delete_message(message_id=2)]",
    "[send_message(sender_name='Eve', receiver_name='Frank', message='See you at 5')]",
    "[send_message(sender_name='Frank', receiver_name='Eve', message='OK')]",
    "[get_all_message_times_with_ids()]", "[get_latest_message_id()]", "[get_earliest_message_id()]",
    "[view_messages_between_users(sender_name='Eve', receiver_name='Frank')]",
    "[view_all_reminders()]", "[view_reminder_by_title(title='Team Meeting')]", "[view_reminder_by_title(title='nope')]",
    "[add_reminder(title='A', description='first', time='2024-01-01 10:00')]",
    "[add_reminder(title='B', description='second', time='2024-01-02 10:00')]",
    "[add_reminder(title='C', description='third', time='2024-01-03 10:00')]",
    "[add_reminder(title='D', description='fourth', time='2024-01-04 10:00')]",
    "[delete_reminder(reminder_id=1001)]", "[delete_reminder(reminder_id=2)]", "[view_all_reminders()]",
    "[search_reminders(keyword='Meeting')]",
    "[check_balance(user_name='Eve')]", "[check_balance(user_name='Nobody')]",
    "[get_products(merchant_name='Heytea')]", "[get_products(merchant_name='Nope')]", "[view_logged_in_users()]",
    "[login_food_platform(username='Eve', password='wrong')]", "[login_food_platform(username='Nobody', password='x')]",
    "[login_food_platform(username='Eve', password='password123')]",
    "[login_food_platform(username='Eve', password='password123')]", "[view_logged_in_users()]",
    "[add_food_delivery_order(username='Frank', merchant_name='Heytea', items=[{'product': 'Cheese Milk Tea', 'quantity': 1}])]",
    "[add_food_delivery_order(username='Eve', merchant_name='Nope', items=[])]",
    "[add_food_delivery_order(username='Eve', merchant_name='Heytea', items=[{'product': 'Cheese Milk Tea', 'quantity': 0}])]",
    "[add_food_delivery_order(username='Eve', merchant_name='Heytea', items=[{'product': 'Nope', 'quantity': 1}, "
    "{'product': 'Cheese Milk Tea', 'quantity': -1}])]",
    "[add_food_delivery_order(username='Eve', merchant_name='Heytea', items=[{'product': 'Cheese Milk Tea', 'quantity': -1}, "
    "{'product': 'Nope', 'quantity': 1}])]",
    "[add_food_delivery_order(username='Eve', merchant_name='Heytea', items=[{'product': 'Cheese Milk Tea'}])]",
    "[add_food_delivery_order(username='Eve', merchant_name='Hema Fresh', items=[{'product': 'Fresh Gift Pack', 'quantity': 5}, "
    "{'product': 'Organic Vegetable Pack', 'quantity': 3}])]",
    "[add_food_delivery_order(username='Eve', merchant_name='Hema Fresh', items=[{'product': 'Organic Vegetable Pack', "
    "'quantity': 3}, {'product': 'Fresh Gift Pack', 'quantity': 1}])]",
    "[add_food_delivery_order(username='Eve', merchant_name='Heytea', items=[])]",
    "[check_balance(user_name='Eve')]", "[view_orders(user_name='Eve')]", "[view_orders(user_name='Frank')]",
    "[search_orders(keyword='GIFT')]", "[search_orders(keyword='heytea')]", "[search_orders(keyword='zzz')]",
    "[turn_on_wifi()]", "[login_device()]",
    "[send_message(sender_name='Grace', receiver_name='Helen', message='Already bought.')]",
    "[send_message(sender_name='Grace', receiver_name='Helen', message='Full?')]",
    "[add_reminder(title='E', description='fifth', time='2024-01-05 10:00')]",
    "[add_reminder(title='F', description='sixth', time='2024-01-06 10:00')]",
    "[login_food_platform(username='Frank', password='password456')]",
    "[add_food_delivery_order(username='Frank', merchant_name='Domino\\'s', items=[{'product': 'Margherita Pizza', 'quantity': 2}])]",
    "[view_orders(user_name='Frank')]",
], "travel": [
    "[get_user_details(user_id='user1', password='password123')]", "[get_user_details(user_id='user1', password='x')]",
    "[get_flight_details()]", "[get_flight_details(origin='Nanjing')]", "[get_flight_details(destination='Xiamen')]",
    "[get_flight_details(origin='Paris', destination='Rome')]",
    "[get_reservation_details()]", "[get_reservation_details(reservation_id='res_3')]",
    "[get_reservation_details(user_id='user2')]", "[get_reservation_details(reservation_id='res_9')]",
    "[find_transfer_flights(origin_city='Beijing', transfer_city='Nanjing', destination_city='Shenzhen')]",
    "[find_transfer_flights(origin_city='Beijing', transfer_city='Shanghai', destination_city='Beijing')]",
    "[find_transfer_flights(origin_city='Xiamen', transfer_city='Chengdu', destination_city='Fuzhou')]",
    "[reserve_flight(user_id='user1', password='password123', flight_no='XX1', cabin='Economy Class', payment_method='bank', baggage_count=1)]",
    "[reserve_flight(user_id='user1', password='bad', flight_no='CA1234', cabin='Economy Class', payment_method='bank', baggage_count=1)]",
    "[reserve_flight(user_id='user1', password='password123', flight_no='CA1234', cabin='First', payment_method='bank', baggage_count=1)]",
    "[reserve_flight(user_id='user1', password='password123', flight_no='CA1234', cabin='Economy Class', payment_method='card', baggage_count=1)]",
    "[reserve_flight(user_id='user3', password='password789', flight_no='CZ4321', cabin='Business Class', payment_method='cash', baggage_count=5)]",
    "[reserve_flight(user_id='user1', password='password123', flight_no='CZ1765', cabin='Business Class', payment_method='cash', baggage_count=4)]",
    "[reserve_flight(user_id='user2', password='password456', flight_no='MU5678', cabin='Economy Class', payment_method='bank', baggage_count=0)]",
    "[get_reservation_details(user_id='user1')]", "[get_user_details(user_id='user1', password='password123')]",
    "[cancel_reservation(user_id='user9', reservation_id='res_1', reason='x')]",
    "[cancel_reservation(user_id='user2', reservation_id='res_1', reason='x')]",
    "[cancel_reservation(user_id='user2', reservation_id='res_4', reason='x')]",
    "[cancel_reservation(user_id='user1', reservation_id='res_1', reason='Change of plans')]",
    "[cancel_reservation(user_id='user1', reservation_id='res_2', reason='The airline has canceled the flight.')]",
    "[cancel_reservation(user_id='user1', reservation_id='res_5', reason='Change of plans')]",
    "[modify_flight(user_id='user1', reservation_id='res_9')]", "[modify_flight(user_id='user2', reservation_id='res_4')]",
    "[modify_flight(user_id='user1', reservation_id='res_2')]",
    "[modify_flight(user_id='user1', reservation_id='res_2', new_flight_no='CA1234')]",
    "[modify_flight(user_id='user1', reservation_id='res_2', new_flight_no='CZ4321', new_cabin='Economy Class', add_baggage=2)]",
    "[modify_flight(user_id='user1', reservation_id='res_2', new_cabin='Business Class', new_payment_method='cash')]",
    "[modify_flight(user_id='user3', reservation_id='res_3', new_cabin='Economy Class')]",
    "[modify_flight(user_id='user2', reservation_id='res_3', new_cabin='Economy Class', add_baggage=3, new_payment_method='cash')]",
    "[modify_flight(user_id='user2', reservation_id='res_3', new_cabin='Premium', add_baggage=1, new_payment_method='card')]",
    "[modify_flight(user_id='user2', reservation_id='res_3', new_flight_no='MH1765', new_cabin='Premium')]",
    "[get_reservation_details(user_id='user1')]", "[get_reservation_details(user_id='user2')]",
    "[get_user_details(user_id='user2', password='password456')]", "[get_user_details(user_id='user3', password='password789')]",
]}


def probes(world: str, language: str) -> list[str]:
    """The probes of a world in a language: the Chinese phone's merchants and products have Chinese names."""
    calls = PROBES[world]
    if world == "phone" and language == "zh":
        names = {"Heytea": "喜茶", "Hema Fresh": "盒马生鲜", "Cheese Milk Tea": "芝士奶茶", "Fresh Gift Pack": "生鲜大礼包",
                 "Organic Vegetable Pack": "有机蔬菜包", "Domino\\'s": "达美乐", "Margherita Pizza": "玛格丽特披萨",
                 "heytea": "喜茶", "GIFT": "礼包"}
        out = []
        for text in calls:
            for en, zh in names.items():
                text = text.replace(f"'{en}'", f"'{zh}'")
            out.append(text)
        return out + ["[mark_as_notified(reminder_id=99)]", "[mark_as_notified(reminder_id=3)]",
                      "[search_reminders(keyword='zzz')]", "[search_reminders(keyword='Meeting')]", "[view_all_reminders()]",
                      "[search_orders(keyword='喜茶')]"]
    if world == "travel" and language == "zh":
        names = {"Economy Class": "经济舱", "Business Class": "商务舱", "The airline has canceled the flight.": "航空公司取消航班",
                 "Beijing": "北京", "Shanghai": "上海", "Nanjing": "南京", "Shenzhen": "深圳", "Xiamen": "厦门",
                 "Chengdu": "成都", "Fuzhou": "福州"}
        for en, zh in names.items():
            calls = [c.replace(f"'{en}'", f"'{zh}'") for c in calls]
    return calls
