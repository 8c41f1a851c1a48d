"""Malformed domains and tasks: each case starts from the scaffolded clinic domain, breaks one thing,
and checks that validation names the right file, line, key path and problem.

A case's expected line is given as a snippet: the line number of the first line of the edited file
that contains it (so the cases survive small changes to the scaffold), or as a plain number.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from muactl.cli import app
from muactl.errors import Problem, SpecError
from muactl.domain.validate import validate_domain

DOMAIN = "domains/clinic/domain.yaml"
POLICY = "domains/clinic/policy.md"
PATIENTS = "domains/clinic/data/patients.jsonl"
APPOINTMENTS = "domains/clinic/data/appointments.csv"
TRAIN = "tasks/clinic/train.yaml"
TEST = "tasks/clinic/test.yaml"

Edit = Callable[[Path], None]


def sub(old: str, new: str) -> Edit:
    """Replace text that occurs exactly once (so a scaffold change fails loudly, not silently)."""

    def edit(path: Path) -> None:
        text = path.read_text()
        assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in {path.name}"
        path.write_text(text.replace(old, new))

    return edit


def put(content: str | bytes) -> Edit:
    def edit(path: Path) -> None:
        path.write_bytes(content if isinstance(content, bytes) else content.encode())

    return edit


def remove(path: Path) -> None:
    path.unlink()


def to_latin1(path: Path) -> None:
    path.write_bytes(path.read_text().encode("latin-1"))


@dataclass
class Case:
    id: str
    edits: list[tuple[str, Edit]]
    file: str  # basename of the file the problem must name
    at: str | int  # snippet on the offending line, or the line number
    key: str  # key path, "" when the problem is the file itself
    message: str  # fragment of the message
    count: int = 1  # how many problems the break causes in all

    @property
    def edited(self) -> str:
        """The project-relative path of the file the problem names."""
        for rel, _ in self.edits:
            if Path(rel).name == self.file:
                return rel
        return {Path(p).name: p for p in (DOMAIN, POLICY, PATIENTS, APPOINTMENTS, TRAIN, TEST)}[self.file]


PHONE_PARAM = '      phone: {type: string, description: "Phone number, digits only, e.g. 5550101.", pattern: "^\\\\d{7}$"}\n'
PATIENT_PARAM = '      patient_id: {type: string, description: "The patient\'s id, e.g. p1."}'
APPT_PARAM = '      appointment_id: {type: string, description: "The appointment\'s id, e.g. a3."}'
FIND_QUERY = "SELECT patient_id FROM patients WHERE phone = :phone"
CANCEL_WRITE = "      - UPDATE appointments SET status = 'cancelled' WHERE appointment_id = :appointment_id"
GOLD_FIND = '      - find_patient_by_phone: {phone: "5550101"}'
ASSERT_A2 = "SELECT status FROM appointments WHERE appointment_id = 'a2'"
PATIENT_COLS = "columns: {patient_id: text, name: text, phone: text, birth_year: integer}"

CASES = [
    # ---------------------------------------------------------------- files that are not YAML at all
    Case("yaml-syntax-colon-in-plain-text",
         [(DOMAIN, sub("    description: List a patient's appointments with their status.",
                       "    description: List a patient's appointments: with their status."))],
         "domain.yaml", "List a patient's appointments: with", "", "a second ': ' on one line; quote a value"),
    Case("yaml-tab-indent", [(DOMAIN, sub("    returns: rows\n", "\treturns: rows\n"))],
         "domain.yaml", "\treturns: rows", "", "YAML indentation error: a tab; YAML indents with spaces only"),
    # issue 27.4: the parser's "expected <block end>, but found '<block mapping start>'" said nothing of indentation
    Case("yaml-key-out-of-line", [(DOMAIN, sub("\n  list_appointments:", "\n   list_appointments:"))],
         "domain.yaml", "   list_appointments:", "",
         "YAML indentation error: this line is indented 3 spaces, out of line with the entries above it (indented 0, 2, 4, 6)"
         "; line it up with its siblings; the line reads '   list_appointments:'"),
    Case("yaml-key-under-a-value", [(DOMAIN, sub("    returns: value ", "      returns: value "))],
         "domain.yaml", "      returns: value", "",
         "YAML indentation error: this line is indented more than the one above it ('query: SELECT patient_id"),
    Case("yaml-task-out-of-line", [(TRAIN, sub("\n  persona: polite", "\n persona: polite"))],
         "train.yaml", " persona: polite", "", "YAML indentation error: this line is indented 1 space, out of line"),
    Case("empty-domain-file", [(DOMAIN, put(""))], "domain.yaml", 1, "", "file is empty"),
    Case("comments-only-domain-file", [(DOMAIN, put("# nothing here yet\n"))], "domain.yaml", 1, "",
         "file holds no data"),
    Case("binary-domain-file", [(DOMAIN, put(b"SQLite format 3\x00\x10\x00"))], "domain.yaml", 1, "",
         "binary file"),
    Case("non-utf8-domain-file",
         [(DOMAIN, sub("small medical clinic", "small m\u00e9dical clinic")), (DOMAIN, to_latin1)],
         "domain.yaml", "small m", "", "not valid UTF-8"),  # the description's second line
    Case("non-utf8-seed-file", [(APPOINTMENTS, put(b"appointment_id,patient_id,doctor,day,status\n"
                                                   b"a1,p1,Dr. Lind,2026-12-02,scheduled\n"
                                                   b"a4,p3,Dr. \xd6sei,2026-12-09,scheduled\n"))],
         "appointments.csv", 3, "", "not valid UTF-8"),
    Case("binary-seed-file", [(PATIENTS, put(b"\x00\x01\x02"))], "patients.jsonl", 1, "", "binary file"),
    Case("top-level-list", [(DOMAIN, put("- name: clinic\n- tools: {}\n"))], "domain.yaml", 1, "",
         "expected a mapping at the top level"),
    # ---------------------------------------------------------------- structure: unknown keys, wrong types
    Case("unknown-key-did-you-mean",
         [(DOMAIN, sub("    description: List a patient's", "    descripton: List a patient's"))],
         "domain.yaml", "descripton:", "tools.list_appointments.descripton", "did you mean 'description'?"),
    Case("unknown-top-level-key", [(DOMAIN, sub("database:\n", "databse:\n"))],
         "domain.yaml", "databse:", "databse", "did you mean 'database'?"),
    Case("unknown-key-in-task", [(TRAIN, sub("    unknown: You do not know", "    unkown: You do not know"))],
         "train.yaml", "unkown:", "[0].user.unkown", "did you mean 'unknown'?"),
    Case("param-type-literal",
         [(DOMAIN, sub(APPT_PARAM, "      appointment_id: {type: str}"))],
         "domain.yaml", "appointment_id: {type: str}", "tools.cancel_appointment.params.appointment_id.type",
         "'str' is not allowed here; expected 'string', 'integer'"),
    Case("column-type-varchar", [(DOMAIN, sub("name: text, phone: text", "name: varchar, phone: text"))],
         "domain.yaml", "name: varchar", "database.tables.patients.columns.name", "did you mean 'text'?"),
    Case("column-type-int", [(DOMAIN, sub("birth_year: integer}", "birth_year: int}"))],
         "domain.yaml", "birth_year: int}", "database.tables.patients.columns.birth_year", "did you mean 'integer'?"),
    Case("returns-literal", [(DOMAIN, sub("returns: value ", "returns: vaule "))],
         "domain.yaml", "returns: vaule", "tools.find_patient_by_phone.returns", "did you mean 'value'?"),
    Case("policy-not-a-string", [(DOMAIN, sub("policy: policy.md", "policy: 123"))],
         "domain.yaml", "policy: 123", "policy", "valid string (got int 123)"),
    Case("enum-not-a-list", [(DOMAIN, sub(APPT_PARAM, "      appointment_id: {type: string, enum: a1}"))],
         "domain.yaml", "enum: a1", "tools.cancel_appointment.params.appointment_id.enum", "valid list"),
    Case("columns-as-list", [(DOMAIN, sub(PATIENT_COLS, "columns: [patient_id, name, phone, birth_year]"))],
         "domain.yaml", "columns: [patient_id", "database.tables.patients.columns", "valid dictionary"),
    # ---------------------------------------------------------------- duplicates
    Case("duplicate-tool-name",
         [(DOMAIN, sub("# How simulated", "  list_appointments:   # again\n    description: Same name.\n"
                                          "    query: SELECT 1\n# How simulated"))],
         "domain.yaml", "list_appointments:   # again", "tools.list_appointments",
         "duplicate key 'list_appointments' (first defined at line 36); each key may appear once"),
    Case("duplicate-table",
         [(DOMAIN, sub("  # Initial rows", "    patients:   # again\n      columns: {a: text}\n  # Initial rows"))],
         "domain.yaml", "patients:   # again", "database.tables.patients", "duplicate key 'patients'"),
    Case("duplicate-column", [(DOMAIN, sub("phone: text, birth_year", "phone: text, name: text, birth_year"))],
         "domain.yaml", "name: text, birth_year", "database.tables.patients.columns.name", "duplicate key 'name'"),
    Case("duplicate-task-id-across-files",
         [(TEST, sub("- id: cancel-only-appointment", "- id: cancel-next-appointment"))],
         "train.yaml", "- id: cancel-next-appointment", "[0].id",
         "duplicate task id 'cancel-next-appointment' (first defined at test.yaml:2)"),
    # ---------------------------------------------------------------- references
    Case("undefined-persona", [(TEST, sub("persona: brief", "persona: briefly"))],
         "test.yaml", "persona: briefly", "[0].persona", "undefined persona 'briefly'; did you mean 'brief'?"),
    Case("undefined-tool-in-gold-actions",
         [(TRAIN, sub("      - cancel_appointment: {appointment_id: a1}", "      - cancel_apointment: {appointment_id: a1}"))],
         "train.yaml", "cancel_apointment", "[0].expect.actions[2].cancel_apointment",
         "undefined tool 'cancel_apointment'; did you mean 'cancel_appointment'?"),
    Case("undefined-tool-in-setup", [(TRAIN, sub("  persona: polite\n", "  persona: polite\n  setup:\n    - reset_db: {}\n"))],
         "train.yaml", "- reset_db: {}", "[0].setup[0].reset_db", "undefined tool 'reset_db'"),
    Case("foreign-key-undefined-table",
         [(DOMAIN, sub("{patient_id: patients.patient_id}", "{patient_id: patient.patient_id}"))],
         "domain.yaml", "foreign_keys:", "database.tables.appointments.foreign_keys.patient_id",
         "references undefined table 'patient'; did you mean 'patients'?"),
    Case("foreign-key-undefined-column",
         [(DOMAIN, sub("{patient_id: patients.patient_id}", "{patient_id: patients.patientid}"))],
         "domain.yaml", "foreign_keys:", "database.tables.appointments.foreign_keys.patient_id",
         "references undefined column 'patients.patientid'; did you mean 'patient_id'?"),
    Case("foreign-key-local-column-undeclared",
         [(DOMAIN, sub("{patient_id: patients.patient_id}", "{patient: patients.patient_id}"))],
         "domain.yaml", "foreign_keys:", "database.tables.appointments.foreign_keys.patient",
         "column 'patient' is not declared; did you mean 'patient_id'?"),
    Case("foreign-key-not-table-dot-column", [(DOMAIN, sub("{patient_id: patients.patient_id}", "{patient_id: patients}"))],
         "domain.yaml", "foreign_keys:", "database.tables.appointments.foreign_keys.patient_id",
         "'patients' should be 'table.column'"),
    Case("primary-key-undefined-column", [(DOMAIN, sub("primary_key: appointment_id", "primary_key: appointmentid"))],
         "domain.yaml", "primary_key: appointmentid", "database.tables.appointments.primary_key",
         "primary key column 'appointmentid' is not declared; did you mean 'appointment_id'?"),
    Case("foreign-key-cycle-with-dangling-row",  # a cycle is legal; it used to crash building the schema
         [(DOMAIN, sub("      primary_key: patient_id\n",
                       "      primary_key: patient_id\n      foreign_keys: {next_visit: appointments.appointment_id}\n")),
          (DOMAIN, sub("birth_year: integer}", "birth_year: integer, next_visit: text}")),
          (PATIENTS, sub('"birth_year": 1990}', '"birth_year": 1990, "next_visit": "a9"}'))],
         "patients.jsonl", '"next_visit": "a9"', "patients[1].next_visit",
         "'a9' not found in appointments.appointment_id (foreign key)"),
    # ---------------------------------------------------------------- SQL
    Case("sql-unknown-column", [(DOMAIN, sub(FIND_QUERY, FIND_QUERY.replace("WHERE phone", "WHERE phon")))],
         "domain.yaml", "WHERE phon =", "tools.find_patient_by_phone.query", "SQL does not compile: no such column: phon"),
    # issue 27.4: in a multi-line query the problem pointed at the `query:` key, and nothing said what was meant
    Case("sql-unknown-column-on-a-later-line", [(DOMAIN, sub("ORDER BY day", "ORDER BY dya"))],
         "domain.yaml", "ORDER BY dya", "tools.list_appointments.query",
         "no such column: dya; did you mean day? (appointments has appointment_id, patient_id, doctor, day, status)"),
    Case("sql-unknown-column-in-an-assertion",
         [(TRAIN, sub("      - query: SELECT status FROM appointments WHERE appointment_id = 'a1'",
                      "      - query: >-\n          SELECT status FROM appointments\n          WHERE appointmnt_id = 'a1'"))],
         "train.yaml", "WHERE appointmnt_id", "[0].expect.assert[0].query",
         "no such column: appointmnt_id; did you mean appointment_id"),
    Case("sql-unknown-table", [(DOMAIN, sub(FIND_QUERY, FIND_QUERY.replace("FROM patients", "FROM patient")))],
         "domain.yaml", "FROM patient WHERE", "tools.find_patient_by_phone.query", "no such table: patient"),
    Case("sql-syntax-error", [(DOMAIN, sub(FIND_QUERY, FIND_QUERY.replace("SELECT", "SELEC")))],
         "domain.yaml", "SELEC patient_id", "tools.find_patient_by_phone.query", 'near "SELEC": syntax error'),
    Case("write-in-query", [(DOMAIN, sub(FIND_QUERY, "DELETE FROM patients WHERE phone = :phone"))],
         "domain.yaml", "DELETE FROM patients", "tools.find_patient_by_phone.query", "only a SELECT is allowed here"),
    Case("ddl-in-writes", [(DOMAIN, sub(CANCEL_WRITE, "      - DROP TABLE appointments  -- :appointment_id"))],
         "domain.yaml", "DROP TABLE", "tools.cancel_appointment.writes[0]",
         "only INSERT, UPDATE or DELETE on declared tables is allowed here"),
    Case("attach-in-writes", [(DOMAIN, sub(CANCEL_WRITE, "      - ATTACH DATABASE :appointment_id AS other"))],
         "domain.yaml", "ATTACH DATABASE", "tools.cancel_appointment.writes[0]",
         "only INSERT, UPDATE or DELETE on declared tables is allowed here"),
    Case("pragma-in-writes", [(DOMAIN, sub(CANCEL_WRITE, "      - PRAGMA user_version = 1  -- :appointment_id"))],
         "domain.yaml", "PRAGMA user_version", "tools.cancel_appointment.writes[0]",
         "only INSERT, UPDATE or DELETE on declared tables is allowed here"),
    Case("two-statements", [(DOMAIN, sub(FIND_QUERY, FIND_QUERY + "; DELETE FROM patients"))],
         "domain.yaml", "; DELETE FROM patients", "tools.find_patient_by_phone.query", "only one SQL statement"),
    Case("param-used-not-declared", [(DOMAIN, sub(FIND_QUERY, FIND_QUERY + " AND name = :name"))],
         "domain.yaml", "AND name = :name", "tools.find_patient_by_phone.query",
         "parameter :name is used but not declared under params"),
    Case("param-declared-unused", [(DOMAIN, sub(PHONE_PARAM, PHONE_PARAM + "      country: {type: string}\n"))],
         "domain.yaml", "country: {type: string}", "tools.find_patient_by_phone.params.country",
         "param 'country' is declared but never used"),
    Case("placeholder-not-declared", [(DOMAIN, sub("No patient with phone {phone}.", "No patient with phone {phone_number}."))],
         "domain.yaml", "{phone_number}", "tools.find_patient_by_phone.if_empty",
         "placeholder {phone_number} is not a declared param; declared: phone"),
    Case("placeholder-in-check-error",
         [(DOMAIN, sub("error: Appointment {appointment_id} does not exist.", "error: Appointment {appointment} does not exist."))],
         "domain.yaml", "{appointment} does not exist", "tools.cancel_appointment.checks[0].error",
         "placeholder {appointment} is not a declared param; did you mean 'appointment_id'?"),
    Case("sql-tool-without-query-or-writes", [(DOMAIN, sub(f"    query: {FIND_QUERY}\n", ""))],
         "domain.yaml", "  find_patient_by_phone:", "tools.find_patient_by_phone", "needs a 'query'"),
    Case("assertion-sql-does-not-compile", [(TEST, sub(ASSERT_A2, ASSERT_A2.replace("SELECT status", "SELECT state")))],
         "test.yaml", "SELECT state", "[1].expect.assert[0].query", "no such column: state"),
    Case("assertion-with-parameter", [(TEST, sub(ASSERT_A2, ASSERT_A2.replace("'a2'", ":appointment_id")))],
         "test.yaml", "= :appointment_id", "[1].expect.assert[0].query", "assertions take no parameters"),
    # ---------------------------------------------------------------- param specs
    Case("invalid-regex", [(DOMAIN, sub('pattern: "^\\\\d{7}$"', 'pattern: "^(\\\\d{7}$"'))],
         "domain.yaml", 'pattern: "^(', "tools.find_patient_by_phone.params.phone.pattern",
         "invalid regular expression: missing )"),
    Case("invalid-regex-nested",  # used to crash jsonschema when the gold args were checked
         [(DOMAIN, sub(PATIENT_PARAM, '      patient_id: {type: object, properties: {id: {type: string, pattern: "("}}}')),
          (TEST, sub("{patient_id: p2}", "{patient_id: {id: p2}}"))],
         "domain.yaml", 'pattern: "("', "tools.list_appointments.params.patient_id.properties.id.pattern",
         "invalid regular expression"),
    Case("array-without-items", [(DOMAIN, sub(PATIENT_PARAM, "      patient_id: {type: array}"))],
         "domain.yaml", "patient_id: {type: array}", "tools.list_appointments.params.patient_id", "needs 'items'"),
    Case("default-breaks-param", [(DOMAIN, sub(PATIENT_PARAM, "      patient_id: {type: string, default: 5}"))],
         "domain.yaml", "default: 5", "tools.list_appointments.params.patient_id.default",
         "default does not fit the param: 5 is not of type 'string'"),
    # ---------------------------------------------------------------- gold actions vs the tool's schema
    Case("gold-arg-wrong-type", [(TRAIN, sub(GOLD_FIND, "      - find_patient_by_phone: {phone: 5550101}"))],
         "train.yaml", "{phone: 5550101}", "[0].expect.actions[0].find_patient_by_phone",
         "'phone': 5550101 is not of type 'string'"),
    Case("gold-arg-pattern", [(TRAIN, sub(GOLD_FIND, '      - find_patient_by_phone: {phone: "555-0101"}'))],
         "train.yaml", "555-0101", "[0].expect.actions[0].find_patient_by_phone", "'555-0101' does not match"),
    Case("gold-arg-missing-required", [(TRAIN, sub(GOLD_FIND, "      - find_patient_by_phone: {}"))],
         "train.yaml", "find_patient_by_phone: {}", "[0].expect.actions[0].find_patient_by_phone",
         "'phone' is a required property"),
    Case("gold-arg-enum", [(DOMAIN, sub(APPT_PARAM, "      appointment_id: {type: string, enum: [a1, a2]}"))],
         "test.yaml", "cancel_appointment: {appointment_id: a3}", "[0].expect.actions[2].cancel_appointment",
         "'a3' is not one of ['a1', 'a2']"),
    Case("gold-arg-unexpected", [(TRAIN, sub(GOLD_FIND, '      - find_patient_by_phone: {phone: "5550101", name: Ana}'))],
         "train.yaml", "name: Ana", "[0].expect.actions[0].find_patient_by_phone", "'name' was unexpected"),
    Case("gold-call-two-tools",
         [(TRAIN, sub(GOLD_FIND + "\n      - list_appointments: {patient_id: p1}\n      - cancel",
                      GOLD_FIND + "\n        list_appointments: {patient_id: p1}\n      - cancel"))],
         "train.yaml", GOLD_FIND, "[0].expect.actions[0]", "exactly one key, the tool name"),
    # ---------------------------------------------------------------- seed rows
    Case("csv-seed-wrong-type",
         [(PATIENTS, remove), ("domains/clinic/data/patients.csv",
                               put("patient_id,name,phone,birth_year\np1,Ana Ruiz,5550101,1984\n"
                                   "p2,Ben Okafor,5550102,nineteen ninety\np3,Chen Wei,5550103,1977\n"))],
         "patients.csv", "nineteen ninety", "patients[1].birth_year", "expected integer, got 'nineteen ninety'"),
    Case("jsonl-seed-wrong-type", [(PATIENTS, sub('"birth_year": 1990', '"birth_year": "1990"'))],
         "patients.jsonl", '"1990"', "patients[1].birth_year", "expected integer, got str '1990'"),
    Case("seed-duplicate-primary-key", [(APPOINTMENTS, sub("a3,p2,", "a1,p2,"))],
         "appointments.csv", "a1,p2,", "appointments[2]", "duplicate primary key 'a1'"),
    Case("seed-foreign-key-missing-row", [(APPOINTMENTS, sub("a4,p3,", "a4,p9,"))],
         "appointments.csv", "a4,p9,", "appointments[3].patient_id", "'p9' not found in patients.patient_id"),
    Case("seed-unknown-column-jsonl", [(PATIENTS, sub('"phone": "5550102"', '"phone_number": "5550102"'))],
         "patients.jsonl", "phone_number", "patients[1].phone_number",
         "unknown column 'phone_number' for table 'patients'; columns: patient_id, name, phone, birth_year"),
    Case("seed-unknown-column-csv-header",
         [(APPOINTMENTS, sub("appointment_id,patient_id,doctor,", "appointment_id,patient_id,docter,"))],
         "appointments.csv", 1, "appointments.docter", "unknown column 'docter' for table 'appointments'; did you mean 'doctor'?"),
    Case("seed-invalid-json-line", [(PATIENTS, sub('"name": "Ben Okafor",', '"name": "Ben Okafor"'))],
         "patients.jsonl", "Ben Okafor", "", "invalid JSON: Expecting ',' delimiter"),
    Case("seed-json-line-not-object", [(PATIENTS, sub('{"patient_id": "p3"', '["p4"]\n{"patient_id": "p3"'))],
         "patients.jsonl", '["p4"]', "", "each line must be a JSON object"),
    Case("seed-csv-row-too-long", [(APPOINTMENTS, sub("2026-12-09,scheduled", "2026-12-09,scheduled,urgent"))],
         "appointments.csv", "urgent", "", "row has more fields than the header"),
    # seed limits (issue 17): each was accepted silently or crashed with an internal error
    Case("seed-csv-field-over-128k", [(APPOINTMENTS, sub("Dr. Park", "Dr. " + "x" * 200_000))],
         "appointments.csv", "a2,p1,", "", "a field is over the 131,072-byte limit (MAX_CSV_FIELD_BYTES)"),
    Case("seed-csv-row-too-short", [(APPOINTMENTS, sub("a3,p2,Dr. Lind,2026-12-05,scheduled", "a3,p2,Dr. Lind"))],
         "appointments.csv", "a3,p2,Dr. Lind", "", "row has fewer fields than the header (3, the header has 5)"),
    Case("seed-csv-unterminated-quote", [(APPOINTMENTS, sub("a3,p2,Dr. Lind", 'a3,p2,"Dr. Lind'))],
         "appointments.csv", 'a3,p2,"Dr. Lind', "", "never closed (unterminated \")"),
    Case("seed-csv-stray-quote", [(APPOINTMENTS, sub("a3,p2,Dr. Lind", 'a3,p2,"Dr." Lind'))],
         "appointments.csv", 'a3,p2,"Dr." Lind', "", "CSV error"),
    Case("seed-jsonl-5000-digit-integer", [(PATIENTS, sub('"birth_year": 1990', '"birth_year": ' + "9" * 5000))],
         "patients.jsonl", "Ben Okafor", "", "integer 999999999999999999999999999999... is out of range"),
    Case("seed-jsonl-integer-out-of-range", [(PATIENTS, sub('"birth_year": 1990', f'"birth_year": {2**63}'))],
         "patients.jsonl", "Ben Okafor", "", "is out of range (SQLite integers lie between"),
    Case("seed-jsonl-100000-deep", [(PATIENTS, sub('"birth_year": 1990', '"birth_year": ' + "[" * 100_000 + "]" * 100_000))],
         "patients.jsonl", "Ben Okafor", "", "JSON nested deeper than 64 levels (MAX_JSON_DEPTH)"),
    Case("seed-jsonl-nan", [(PATIENTS, sub('"birth_year": 1990', '"birth_year": NaN'))],
         "patients.jsonl", "Ben Okafor", "", "NaN is not JSON"),
    Case("seed-csv-integer-out-of-range",
         [("domains/clinic/data/patients.jsonl", remove),
          ("domains/clinic/data/patients.csv", put("patient_id,name,phone,birth_year\np1,Ana Ruiz,5550101,1984\n"
                                                  f"p2,Ben Okafor,5550102,{'9' * 5000}\np3,Chen Wei,5550103,1977\n"))],
         "patients.csv", "Ben Okafor", "patients[1].birth_year", "an integer of 5000 digits is out of range"),
    # ---------------------------------------------------------------- names (issue 17)
    Case("table-name-with-quote", [(DOMAIN, sub("    patients:\n", '    "pat\\"ients":\n'))],
         "domain.yaml", 'pat\\"ients', 'database.tables.pat"ients', "is not allowed: use letters, digits and underscores"),
    Case("column-name-with-quote", [(DOMAIN, sub("name: text, phone: text", '"na\\"me": text, phone: text'))],
         "domain.yaml", 'na\\"me', 'database.tables.patients.columns.na"me', "is not allowed"),
    Case("table-named-sqlite-stat1", [(DOMAIN, sub("    patients:\n", "    sqlite_stat1:\n"))],
         "domain.yaml", "sqlite_stat1:", "database.tables.sqlite_stat1", "reserved: SQLite owns names starting with 'sqlite_'"),
    # ---------------------------------------------------------------- YAML limits (issue 17)
    Case("yaml-billion-laughs",
         [(DOMAIN, lambda p: p.write_text("x0: &x0 [a, a, a, a, a, a, a, a, a, a]\n" + "".join(
             f"x{i}: &x{i} [{', '.join([f'*x{i - 1}'] * 10)}]\n" for i in range(1, 10)) + p.read_text()))],
         "domain.yaml", "x4: &x4", "", "YAML limit exceeded: the document holds more than 100,000 values"),
    Case("yaml-deep-nesting", [(TRAIN, lambda p: p.write_text(p.read_text() + "- " + "[" * 50_000 + "]" * 50_000 + "\n"))],
         "train.yaml", "[[[[", "", "YAML limit exceeded: nesting deeper than 64 levels (MAX_YAML_DEPTH)"),
    Case("yaml-python-tag", [(DOMAIN, sub("policy: policy.md", "policy: !!python/object/apply:os.system [echo hi]"))],
         "domain.yaml", "!!python", "", "tag '!!python/object/apply:os.system' is not allowed"),
    Case("policy-file-over-1-mib", [(POLICY, put("x" * 1_100_000))],
         "policy.md", 1, "", "over the 1,048,576-byte limit (MAX_POLICY_BYTES)"),
    Case("yaml-file-over-1-mib", [(TEST, lambda p: p.write_text(p.read_text() + "# " + "x" * 1_100_000 + "\n"))],
         "test.yaml", 1, "", "over the 1,048,576-byte limit (MAX_YAML_BYTES)"),
    Case("seed-file-for-undeclared-table", [("domains/clinic/data/doctors.csv", put("doctor_id,name\nd1,Dr. Lind\n"))],
         "doctors.csv", 1, "", "seed file for undeclared table 'doctors'"),
    Case("two-seed-files-for-one-table",
         [("domains/clinic/data/patients.csv", put("patient_id,name,phone,birth_year\np1,Ana Ruiz,5550101,1984\n"))],
         "patients.jsonl", 1, "", "table 'patients' already has seed file patients.csv"),
    Case("inline-seed-wrong-type",
         [(DOMAIN, sub("  seed: data/", "  seed:\n    patients:\n"
                                        "      - {patient_id: p1, name: Ana, phone: '5550101', birth_year: 1984}\n"
                                        "      - {patient_id: p2, name: Ben, phone: '5550102', birth_year: unknown}"))],
         "domain.yaml", "birth_year: unknown", "database.seed.patients[1].birth_year", "expected integer, got str 'unknown'"),
    Case("seed-folder-missing", [(DOMAIN, sub("seed: data/", "seed: seeds/"))],
         "domain.yaml", "seed: seeds/", "database.seed", "folder 'seeds/' not found"),
    # ---------------------------------------------------------------- policy
    Case("policy-file-missing", [(POLICY, remove)], "domain.yaml", "policy: policy.md", "policy",
         "file 'policy.md' not found beside domain.yaml"),
    Case("policy-file-empty", [(POLICY, put("\n"))], "policy.md", 1, "policy", "file is empty"),
    # ---------------------------------------------------------------- replaying the gold path
    Case("gold-action-fails-on-replay",
         [(TEST, sub("      - cancel_appointment: {appointment_id: a3}", "      - cancel_appointment: {appointment_id: a2}"))],
         "test.yaml", "{appointment_id: a2}", "[0].expect.actions[2].cancel_appointment",
         "gold action fails when replayed: Error: Appointment a2 is not scheduled"),
    Case("setup-fails-on-replay",
         [(TRAIN, sub("  persona: polite\n", "  persona: polite\n  setup:\n    - cancel_appointment: {appointment_id: a2}\n"))],
         "train.yaml", "{appointment_id: a2}", "[0].setup[0].cancel_appointment", "setup fails when replayed"),
    Case("assertion-does-not-hold", [(TEST, sub("        equals: completed", "        equals: cancelled"))],
         "test.yaml", ASSERT_A2, "[1].expect.assert[0]",
         "assertion does not hold after the gold actions: got 'completed', expected 'cancelled'"),
    # ---------------------------------------------------------------- task file shape
    Case("task-file-is-a-mapping", [(TEST, put("id: lone-task\nuser:\n  reason: Something.\n"))],
         "test.yaml", 1, "id", "a task file is a list of tasks"),
    Case("task-file-tasks-not-a-list", [(TEST, put("tasks:\n  id: lone-task\n"))],
         "test.yaml", 1, "tasks", "expected a list of tasks"),
    Case("task-missing-user",
         [(TRAIN, sub("  user:\n    reason: You want to know on which day your next appointment is.\n"
                      "    known: Your phone number is 5550103.\n", ""))],
         "train.yaml", "- id: ask-appointment-day", "[1].user", "required key 'user' is missing"),
    Case("task-bad-split", [(TRAIN, sub("- id: ask-appointment-day\n", "- id: ask-appointment-day\n  split: dev\n"))],
         "train.yaml", "split: dev", "[1].split", "'dev' is not allowed here; expected 'train' or 'test'"),
    Case("task-item-not-a-mapping", [(TEST, lambda p: p.write_text(p.read_text() + "\n- just a sentence\n"))],
         "test.yaml", "- just a sentence", "[2]", "valid dictionary or instance of Task (got str"),
    Case("duplicate-key-in-task",
         [(TRAIN, sub("    known: Your phone number is 5550103.\n",
                      "    known: Your phone number is 5550103.\n    known: You live in Lisbon.\n"))],
         "train.yaml", "known: You live in Lisbon.", "[1].user.known",
         "duplicate key 'known' (first defined at line 23)"),
]


def _break(project: Path, case: Case) -> None:
    for rel, edit in case.edits:
        edit(project / rel)


def _line(project: Path, case: Case) -> int:
    if isinstance(case.at, int):
        return case.at
    raw = (project / case.edited).read_bytes().decode("utf-8", errors="replace")
    for n, line in enumerate(raw.splitlines(), 1):
        if case.at in line:
            return n
    raise AssertionError(f"{case.at!r} not in {case.edited}")


def _problems(name: str = "clinic") -> list[Problem]:
    with pytest.raises(SpecError) as info:
        validate_domain(name)
    return info.value.problems


def test_enough_cases():
    assert len(CASES) >= 35
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.timeout(120)  # without the YAML limits, the alias bomb case ran for minutes
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_malformed(project, case):
    _break(project, case)
    line = _line(project, case)
    problems = _problems()
    shown = "\n".join(str(p) for p in problems)
    match = [p for p in problems if Path(p.file).name == case.file and p.key == case.key]
    assert match, f"no problem in {case.file} at key {case.key!r}; got:\n{shown}"
    assert any(p.line == line for p in match), f"expected line {line}; got:\n{shown}"
    assert any(case.message in p.message for p in match if p.line == line), f"expected {case.message!r}; got:\n{shown}"
    assert len(problems) == case.count, f"one break should give {case.count} problem(s); got:\n{shown}"


def test_problem_format(project):
    _break(project, next(c for c in CASES if c.id == "undefined-persona"))
    (p,) = _problems()
    assert p.file == str(project / TEST)
    assert str(p) == f"{project / TEST}:3:3: [0].persona: undefined persona 'briefly'; did you mean 'brief'?"


def test_every_problem_in_every_file_is_reported_at_once(project):
    sub("policy: policy.md", "policy: rules.md")(project / DOMAIN)
    sub('"name": "Ben Okafor",', '"name": "Ben Okafor"')(project / PATIENTS)
    sub("persona: brief", "persona: briefly")(project / TEST)  # a broken domain still gets its tasks loaded
    sub("    known: Your phone number is 5550103.\n", "    known: a\n    known: b\n")(project / TRAIN)
    problems = _problems()
    where = {(Path(p.file).name, p.line, p.key) for p in problems}
    assert ("domain.yaml", 10, "policy") in where
    assert ("patients.jsonl", 2, "") in where
    assert ("train.yaml", 24, "[1].user.known") in where
    # the task checks run on what parsed, though the domain has problems: the persona is among these
    assert ("test.yaml", 3, "[0].persona") in where
    assert len(problems) == 4, "\n".join(map(str, problems))


def test_problems_of_every_phase_in_one_run(project):
    """Five problems that used to take four runs (each phase stopped the next): a tool's unknown key,
    SQL naming an unknown table, a seed value of the wrong type, an undefined persona, an unknown task key."""
    sub("    description: List a patient's appointments", "    descripton: List a patient's appointments")(project / DOMAIN)
    sub("FROM patients WHERE phone", "FROM patientz WHERE phone")(project / DOMAIN)
    sub('"birth_year": 1990}', '"birth_year": "nineteen"}')(project / PATIENTS)
    sub("- id: cancel-next-appointment\n  persona: polite", "- id: cancel-next-appointment\n  persona: polit")(project / TRAIN)
    sub('    outputs: ["2026-12-09"]', '    outputs: ["2026-12-09"]\n    bogus: 1')(project / TRAIN)
    problems = _problems()
    keys = sorted((Path(p.file).name, p.key) for p in problems)
    assert keys == [("domain.yaml", "tools.find_patient_by_phone.query"), ("domain.yaml", "tools.list_appointments.descripton"),
                    ("patients.jsonl", "patients[1].birth_year"), ("train.yaml", "[0].persona"),
                    ("train.yaml", "[1].expect.bogus")], "\n".join(map(str, problems))


def test_an_indentation_error_does_not_hide_another_files_problems(project):
    sub("\n  list_appointments:", "\n   list_appointments:")(project / DOMAIN)
    sub("  persona: polite", "  persona: polite\n  bogus: 1")(project / TRAIN)
    sub("\n  persona: brief", "\n   persona: brief")(project / TEST)
    problems = _problems()
    found = sorted((Path(p.file).name, p.line, p.message.split(":")[0]) for p in problems)
    assert [f[0] for f in found] == ["domain.yaml", "test.yaml", "train.yaml"], "\n".join(map(str, problems))
    assert all("indentation" in p.message for p in problems if Path(p.file).name != "train.yaml")


def test_gold_paths_replayed_past_read_only_tools_broken_in_the_domain(project):
    """Issue 27.4: two domain mistakes in tools the gold path only reads hid the gold path's own failure
    (it showed up on the next run). The replay now goes on without those reads and says so."""
    sub("    returns: value ", "    returns: valu ")(project / DOMAIN)
    sub("if_empty: No appointments for patient {patient_id}.", "if_empty: No appointments for patient {patient}.")(project / DOMAIN)
    sub("cancel_appointment: {appointment_id: a1}", "cancel_appointment: {appointment_id: a9}")(project / TRAIN)
    problems = _problems()
    keys = sorted((Path(p.file).name, p.key) for p in problems)
    assert keys == [("domain.yaml", "tools.find_patient_by_phone.returns"), ("domain.yaml", "tools.list_appointments.if_empty"),
                    ("train.yaml", "[0].expect.actions[2].cancel_appointment")], "\n".join(map(str, problems))
    replay = next(p for p in problems if p.key.endswith("cancel_appointment"))
    assert "Appointment a9 does not exist" in replay.message
    assert "replayed without find_patient_by_phone, list_appointments" in replay.message


@pytest.mark.parametrize("table_break", [
    sub(PATIENT_COLS, PATIENT_COLS.replace("phone: text", "phone: txt")),  # the table is left out as it parses
    sub("      primary_key: patient_id\n", "      primary_key: patient_idd\n"),  # it parses, the domain's checks fail it
], ids=["column-type", "primary-key"])
def test_a_table_mistake_does_not_hide_the_other_tools_checks_or_the_gold_paths(project, table_break):
    """Issue 27: a mistake in one table hid every later phase (the other tools' SQL, seed rows, gold replays) until
    it was fixed. Now what uses that table is left out with it, and the rest is checked in the same run."""
    table_break(project / DOMAIN)
    sub("WHERE patient_id = :patient_id ORDER BY day", "WHERE patient_id = :patient_id ORDER BY dayy")(project / DOMAIN)
    sub("cancel_appointment: {appointment_id: a1}", "cancel_appointment: {appointment_id: a9}")(project / TRAIN)
    problems = _problems()
    keys = sorted((Path(p.file).name, ".".join(p.key.split(".")[:3]) if p.key.startswith("database") else p.key)
                  for p in problems)
    assert keys == [("domain.yaml", "database.tables.patients"), ("domain.yaml", "tools.list_appointments.query"),
                    ("train.yaml", "[0].expect.actions[2].cancel_appointment")], "\n".join(map(str, problems))
    replay = next(p for p in problems if p.key.endswith("cancel_appointment"))
    assert "Appointment a9 does not exist" in replay.message, replay.message
    assert "replayed without find_patient_by_phone, list_appointments" in replay.message, replay.message


def test_a_gold_path_that_writes_through_a_broken_tool_is_not_replayed(project):
    # without its writes the end state would differ from the gold one: a second, false problem
    sub("    writes:                              # run", "    write:                              # run")(project / DOMAIN)
    keys = sorted((Path(p.file).name, p.key) for p in _problems())
    assert keys == [("domain.yaml", "tools.cancel_appointment.write")], keys


def test_gold_paths_replayed_when_only_task_files_have_problems(project):
    sub("    known: Your phone number is 5550103.\n", "    known: a\n    known: b\n")(project / TRAIN)
    sub("equals: cancelled", "equals: canceled")(project / TEST)
    keys = sorted((Path(p.file).name, p.key) for p in _problems())
    assert keys == [("test.yaml", "[0].expect.assert[0]"), ("train.yaml", "[1].user.known")], keys


def test_structural_and_semantic_problems_in_different_files_together(project):
    sub("SELECT patient_id FROM patients", "SELECT id FROM patients")(project / DOMAIN)
    (project / TEST).write_text("just: [a mapping\n")
    problems = _problems()
    files = sorted(Path(p.file).name for p in problems)
    assert files == ["domain.yaml", "test.yaml"], "\n".join(map(str, problems))


def test_foreign_key_cycle_is_allowed(project):
    sub("      primary_key: patient_id\n",
        "      primary_key: patient_id\n      foreign_keys: {next_visit: appointments.appointment_id}\n")(project / DOMAIN)
    sub("birth_year: integer}", "birth_year: integer, next_visit: text}")(project / DOMAIN)
    sub('"birth_year": 1990}', '"birth_year": 1990, "next_visit": "a3"}')(project / PATIENTS)
    validate_domain("clinic")


def test_csv_with_byte_order_mark_is_fine(project):
    path = project / APPOINTMENTS
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    validate_domain("clinic")


runner = CliRunner()

CLI_CASES = ["yaml-syntax-colon-in-plain-text", "binary-domain-file", "duplicate-tool-name",
             "invalid-regex-nested", "seed-foreign-key-missing-row", "gold-action-fails-on-replay"]


@pytest.mark.parametrize("case_id", CLI_CASES)
def test_cli_validate_exits_2_with_file_line_key(project, case_id):
    case = next(c for c in CASES if c.id == case_id)
    _break(project, case)
    line = _line(project, case)
    r = runner.invoke(app, ["validate", "clinic"])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    key = f" {case.key}:" if case.key else ""
    assert f"{case.file}:{line}:" in r.output and key in r.output and case.message in r.output, r.output
