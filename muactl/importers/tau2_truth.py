"""The recorded ground truth of τ²-bench's own tools, and how muactl's results are compared with it.

`benchmarks/tau2_record.py` runs τ²'s Python tools on every gold action of every task and writes
`tests/data/tau2/<domain>.json`: per action the error text (or null) and a digest of the output, per
task τ²'s final database hash and a digest of each changed record. Only digests are kept, so no τ²
data is copied into this repository. This module is plain standard library: the recorder (which runs
under τ²'s dependencies) and the verifier (under muactl's) share it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


# Calls off the gold paths (telecom, where agents and users have the most to try): run after the setup of
# every PROBE_EVERY-th task, in order, each on the state the previous ones left; recorded per call as
# [error text or null, output digest or null]. (requestor, tool, args).
# No connect_vpn: τ²'s default VPN details are one object shared by all tasks, which its break_vpn mutates.
PROBE_EVERY = 12
PROBES: dict[str, list[tuple[str, str, dict]]] = {"telecom": [
    *(("assistant", name, args) for name, args in [
        ("get_customer_by_phone", {"phone_number": "555-123-2002"}),
        ("get_customer_by_phone", {"phone_number": "555-123-2005"}), ("get_customer_by_phone", {"phone_number": "0"}),
        ("get_customer_by_id", {"customer_id": "C1002"}), ("get_customer_by_id", {"customer_id": "C9"}),
        ("get_customer_by_name", {"full_name": "john smith", "dob": "1985-06-15"}),
        *(("get_details_by_id", {"id": i}) for i in ("L1003", "D1001", "B1001", "C1003", "P1004", "X1", "L9")),
        ("get_bills_for_customer", {"customer_id": "C1001"}), ("get_bills_for_customer", {"customer_id": "C1002", "limit": 1}),
        ("get_data_usage", {"customer_id": "C1001", "line_id": "L1002"}),
        ("get_data_usage", {"customer_id": "C1001", "line_id": "L1004"}),
        ("suspend_line", {"customer_id": "C1002", "line_id": "L1005", "reason": "travel"}),
        ("suspend_line", {"customer_id": "C1002", "line_id": "L1005", "reason": "travel"}),
        ("resume_line", {"customer_id": "C1001", "line_id": "L1001"}),
        ("send_payment_request", {"customer_id": "C1001", "bill_id": "B1002"}),
        ("send_payment_request", {"customer_id": "C1001", "bill_id": "B1001"}),
        ("disable_roaming", {"customer_id": "C1001", "line_id": "L1002"}),
        ("disable_roaming", {"customer_id": "C1001", "line_id": "L1002"}),
        ("enable_roaming", {"customer_id": "C1001", "line_id": "L1002"}),
        ("refuel_data", {"customer_id": "C1001", "line_id": "L1002", "gb_amount": -1}),
        ("refuel_data", {"customer_id": "C1002", "line_id": "L1006", "gb_amount": 1.5})]),
    *(("user", name, args) for name, args in [
        ("check_status_bar", {}), ("check_network_status", {}), ("check_network_mode_preference", {}),
        ("run_speed_test", {}), ("check_sim_status", {}), ("check_data_restriction_status", {}),
        ("check_apn_settings", {}), ("check_wifi_status", {}), ("check_wifi_calling_status", {}),
        ("check_vpn_status", {}), ("check_installed_apps", {}), ("check_app_status", {"app_name": "messaging"}),
        ("check_app_status", {"app_name": "camera"}), ("check_app_permissions", {"app_name": "browser"}),
        ("check_app_permissions", {"app_name": "camera"}), ("can_send_mms", {}), ("check_payment_request", {}),
        ("grant_app_permission", {"app_name": "messaging", "permission": "Camera"}),
        ("grant_app_permission", {"app_name": "camera", "permission": "sms"}), ("toggle_wifi", {}),
        ("check_wifi_status", {}), ("disconnect_vpn", {}), ("toggle_data_saver_mode", {}), ("run_speed_test", {}),
        ("set_network_mode_preference", {"mode": "2g_only"}), ("run_speed_test", {}), ("can_send_mms", {}),
        ("set_apn_settings", {"apn_settings": {"apn_name": "broken"}}), ("check_apn_settings", {}),
        ("reset_apn_settings", {}), ("reboot_device", {}), ("check_apn_settings", {}), ("toggle_airplane_mode", {}),
        ("toggle_wifi", {}), ("check_network_status", {}), ("make_payment", {}), ("check_payment_request", {})]),
]}




def _unlock_and_call(name: str, *argss: dict) -> list[tuple[str, str, dict]]:
    """banking_knowledge: unlock a discoverable tool, then call it with each set of arguments."""
    return [("assistant", "unlock_discoverable_agent_tool", {"agent_tool_name": name}),
            *(("assistant", "call_discoverable_agent_tool", {"agent_tool_name": name, "arguments": json.dumps(a)})
              for a in argss)]


# banking_knowledge off its gold paths: the discoverable tools no gold path calls, failures of those it does,
# its builtins' refusals and the user's tools (every text τ² answers with, failures included, is an output)
PROBES["banking_knowledge"] = [
    ("assistant", "get_user_information_by_name", {"customer_name": "Nobody Here"}),
    ("assistant", "transfer_to_human_agents", {"summary": "s", "reason": "bogus"}),
    ("assistant", "unlock_discoverable_agent_tool", {"agent_tool_name": "nope_0000"}),
    ("assistant", "call_discoverable_agent_tool", {"agent_tool_name": "freeze_debit_card_3892", "arguments": "{}"}),
    *_unlock_and_call("example_agent_tool_0000", {}),
    *_unlock_and_call("activate_debit_card_8291",
                      {"card_id": "dbc_4e8d2a6f9c", "last_4_digits": "8765", "expiration_date": "11/29",
                       "cvv": "123", "pin": "8080"},
                      {"card_id": "dbc_7a3f9c2b1e", "last_4_digits": "2847", "expiration_date": "11/29",
                       "cvv": "12", "pin": "8080"},
                      {"card_id": "dbc_7a3f9c2b1e", "last_4_digits": "2847", "expiration_date": "11/29",
                       "cvv": "123", "pin": "8080"}),
    *_unlock_and_call("activate_debit_card_8293",
                      {"card_id": "dbc_9b1c5d7e3a", "last_4_digits": "5291", "expiration_date": "11/29",
                       "cvv": "321", "pin": "1234"},
                      {"card_id": "dbc_9b1c5d7e3a", "last_4_digits": "5291", "expiration_date": "11/29",
                       "cvv": "321", "pin": "7777"},
                      {"card_id": "dbc_9b1c5d7e3a", "last_4_digits": "5291", "expiration_date": "11/29",
                       "cvv": "321", "pin": "2580"}),
    *_unlock_and_call("activate_debit_card_8292",
                      {"card_id": "dbc_4e8d2a6f9c", "last_4_digits": "0000", "expiration_date": "11/29",
                       "cvv": "321", "pin": "2580"},
                      {"card_id": "dbc_4e8d2a6f9c", "last_4_digits": "8765", "expiration_date": "11/29",
                       "cvv": "321", "pin": "2580"}),
    *_unlock_and_call("change_debit_card_pin_6285",
                      {"card_id": "dbc_lj82d4f1a9_bluest", "current_pin": "2580", "new_pin": "2580"},
                      {"card_id": "dbc_lj82d4f1a9_bluest", "current_pin": "1357", "new_pin": "2580"},
                      {"card_id": "dbc_9b1c5d7e3a", "current_pin": "2580", "new_pin": "1357"}),
    *_unlock_and_call("set_debit_card_recurring_block_7382",
                      {"card_id": "dbc_538bfb9cba", "block_recurring": True},
                      {"card_id": "dbc_538bfb9cba", "block_recurring": False},
                      {"card_id": "dbc_nope", "block_recurring": True}),
    *_unlock_and_call("freeze_debit_card_3892", {"card_id": "dbc_kj93a7b2e1_blue"}, {"card_id": "dbc_kj93a7b2e1_blue"}),
    *_unlock_and_call("unfreeze_debit_card_3893", {"card_id": "dbc_kj93a7b2e1_blue"}),
    *_unlock_and_call("close_debit_card_4721", {"card_id": "dbc_kj93a7b2e1_green", "reason": "FRAUD_SUSPECTED"},
                      {"card_id": "dbc_kj93a7b2e1_green", "reason": "lost"}),
    *_unlock_and_call("request_temporary_debit_card_limit_increase_8374",
                      {"card_id": "dbc_kj93a7b2e1_lightgreen", "limit_type": "atm", "new_limit": 500},
                      {"card_id": "dbc_538bfb9cba", "limit_type": "purchase", "new_limit": 500},
                      {"card_id": "dbc_538bfb9cba", "limit_type": "atm", "new_limit": 100000}),
    *_unlock_and_call("get_debit_cards_by_account_id_7823", {"account_id": "chk_kj93a7b2e1_1"}, {"account_id": "01"}),
    *_unlock_and_call("open_bank_account_4821", {"user_id": "123", "account_type": "business_savings",
                                                 "account_class": "Gold Account"}),
    ("assistant", "list_discoverable_agent_tools", {}),
    ("assistant", "give_discoverable_user_tool", {"discoverable_tool_name": "deposit_check_3847",
                                                  "arguments": '{"amount": 5}'}),
    ("user", "call_discoverable_user_tool", {"discoverable_tool_name": "deposit_check_3847",
                                             "arguments": '{"account_id": "01", "check_amount": 100}'}),
    ("assistant", "give_discoverable_user_tool", {"discoverable_tool_name": "deposit_check_3847"}),
    ("user", "call_discoverable_user_tool", {"discoverable_tool_name": "deposit_check_3847",
                                             "arguments": '{"account_id": "01", "check_amount": 100}'}),
    ("user", "call_discoverable_user_tool", {"discoverable_tool_name": "deposit_check_3847",
                                             "arguments": '{"account_id": "01", "check_amount": -3}'}),
    ("user", "list_discoverable_user_tools", {}),
    ("user", "submit_transaction", {"user_id": "123", "credit_card_type": "Tin Card", "merchant_name": "M",
                                    "amount": 10.5, "category": "Travel"}),
    ("user", "submit_transaction", {"user_id": "123", "credit_card_type": "Silver Rewards Card", "merchant_name": "M",
                                    "amount": 10.5, "category": "Travel"}),
    ("user", "apply_for_credit_card", {"card_type": "Tin Card", "customer_name": "A B", "annual_income": 1}),
    ("user", "request_human_agent_transfer", {}),
    ("user", "request_human_agent_transfer", {}),
]


# banking_knowledge's get_atm_deposit_images_8473 (no gold path calls it; τ²'s database has no ATM deposit):
# invented transactions added to the first task's database, then the tool called on each id, so every branch
# of τ²'s method answers: the three ids its code has scans for, the images-not-available text, its errors
ATM_DEPOSITS = {
    "btxn_834027370c20": {"type": "atm_deposit", "description": "RHO-BANK ATM #3921 DEPOSIT", "date": "11/05/2025",
                          "amount": 385.0},
    "btxn_test_deposit_001": {"type": "atm_deposit", "description": "RhoBank atm deposit", "amount": 385},
    "btxn_test_atm_dep_partial": {"type": "atm_deposit", "description": "Rho-Bank ATM", "date": None, "amount": 500},
    "atm_dep_rho_1": {"type": "atm_deposit", "description": "rho-bank ATM 12", "date": "10/01/2025", "amount": -123.456},
    "atm_dep_rho_2": {"type": "atm_deposit", "description": "RHOBANK ATM 7"},
    "atm_dep_other": {"type": "atm_deposit", "description": "Allpoint ATM 55", "date": "10/02/2025", "amount": 20},
    "atm_dep_bare": {"type": "atm_deposit"},
    "dep_not_atm": {"type": "deposit", "description": "RHO-BANK branch deposit", "amount": 10},
    "dep_no_type": {"description": "RHO-BANK ATM"},
}
ATM_PROBE_IDS = [*ATM_DEPOSITS, "", "btxn_nope_000"]


def tau2_hash(dump: Any) -> str:
    """τ²'s database hash: sha256 of json.dumps(model_dump, sort_keys=True, default=str)."""
    return hashlib.sha256(json.dumps(dump, sort_keys=True, default=str).encode()).hexdigest()


def _plain(value: Any) -> Any:
    # "equal as parsed JSON" in Python's sense: 2.0 == 2, so integral floats are written as ints
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def digest(value: Any) -> str:
    """A short digest of a JSON value, independent of key order and of 2 vs 2.0."""
    text = json.dumps(_plain(value), sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def output_digest(content: str) -> str:
    """Digest of a tool's text output, parsed as JSON when it is JSON (a plain string otherwise)."""
    try:
        value = json.loads(content)
    except (ValueError, TypeError):
        value = content
    return digest(value)


def text_digest(text: str) -> str:
    """Digest of a text as the model reads it: its exact UTF-8 bytes."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def without_titles(schema: Any) -> Any:
    """A JSON schema without pydantic's `title` keywords (a property named "title" is kept)."""
    if isinstance(schema, list):
        return [without_titles(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "title":
            continue
        if key in ("properties", "$defs") and isinstance(value, dict):  # maps of names to schemas
            out[key] = {name: without_titles(s) for name, s in value.items()}
        elif key in ("default", "enum", "const", "examples"):  # values, not schemas
            out[key] = value
        else:
            out[key] = without_titles(value)
    return out


def schema_digest(openai_schema: dict) -> str:
    """Digest of a tool's OpenAI function schema as the model is sent it, `title`s left out: the bytes of
    json.dumps in the schema's own key order."""
    return text_digest(json.dumps(without_titles(openai_schema)))


def changed_records(before: dict, after: dict) -> dict[str, str]:
    """'table/key' -> digest of the record, for every record added, changed or removed (None)."""
    out: dict[str, str] = {}
    for table in sorted(set(before) | set(after)):
        old, new = before.get(table), after.get(table)
        if old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            for key in sorted(set(old) | set(new), key=str):
                if old.get(key) != new.get(key):
                    out[f"{table}/{key}"] = digest(new[key]) if key in new else None
        else:
            out[table] = digest(new)
    return out
