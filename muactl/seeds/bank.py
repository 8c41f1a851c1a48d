"""The bank domain's data: customers and their accounts.

Kept small on purpose so a tiny model can learn the domain on a CPU: short first names, short
random ids (c17, a305: random, not sequential, so a model must copy them rather than count),
and small integer balances. Every customer has a checking account; some also have a savings
and/or a holiday account, at most one of each kind, so "my savings" names exactly one account.

Scale 1 gives 40 customers and about 90 accounts; scale N multiplies the counts, widens the id
ranges (c10..c{100N-1}, a100..a{1000N-1}) and, past the first-name pool, gives every customer a
first and last name so names stay unique. The same (scale, seed) always gives the same rows; a new
seed gives a fresh database with the same shape (for training on many databases).
"""

from __future__ import annotations

import random

FIRST_NAMES = [
    "Ana", "Ben", "Cal", "Dan", "Eva", "Finn", "Gus", "Hal", "Ida", "Jo", "Kai", "Lea", "Max",
    "Nia", "Oli", "Pia", "Ray", "Sam", "Tia", "Uma", "Val", "Wes", "Zoe", "Amy", "Bo", "Cy",
    "Dee", "Eli", "Fay", "Gil", "Hana", "Ivy", "Jack", "Kim", "Liv", "Mia", "Ned", "Ola", "Pat",
    "Quin", "Rex", "Sue", "Tom", "Una", "Vic", "Yara", "Zed", "Abe", "Bea", "Cleo", "Dax",
    "Emma", "Fred", "Gwen", "Hugo", "Iris", "Jude", "Kit", "Lou", "Noor",
]
LAST_NAMES = [
    "Lee", "Cruz", "Diaz", "Fox", "Gray", "Hill", "King", "Lane", "Moss", "Nash", "Park", "Reed",
    "Ross", "Shaw", "Stone", "Wade", "West", "Wood", "Young", "Bell", "Ford", "Hart", "Kent", "Long",
]

CUSTOMERS_PER_SCALE = 40
# kind -> (chance a customer has one, chance its balance is 0)
KINDS = {"checking": (1.0, 0.05), "savings": (0.75, 0.15), "holiday": (0.5, 0.35)}


def _names(rng: random.Random, n: int) -> list[str]:
    if n <= len(FIRST_NAMES):
        return rng.sample(FIRST_NAMES, n)
    pool = [f"{f} {l}" for f in FIRST_NAMES for l in LAST_NAMES]
    if n > len(pool):
        raise ValueError(f"at most {len(pool)} unique customer names; lower the scale")
    return rng.sample(pool, n)


def generate(scale: int = 1, seed: int = 0) -> dict[str, list[dict]]:
    if scale < 1:
        raise ValueError("scale must be at least 1")
    rng = random.Random(seed)
    n = CUSTOMERS_PER_SCALE * scale
    customer_nums = sorted(rng.sample(range(10, 100 * scale), n))
    names = _names(rng, n)
    customers = [{"customer_id": f"c{num}", "name": name} for num, name in zip(customer_nums, names)]

    owned: list[tuple[str, str]] = []  # (customer_id, kind)
    for c in customers:
        for kind, (p_has, _) in KINDS.items():
            if rng.random() < p_has:
                owned.append((c["customer_id"], kind))
    account_nums = sorted(rng.sample(range(100, 1000 * scale), len(owned)))
    rng.shuffle(account_nums)
    accounts = []
    for num, (cid, kind) in zip(account_nums, owned):
        p_zero = KINDS[kind][1]
        balance = 0 if rng.random() < p_zero else rng.randint(1, 120) * 5
        accounts.append({"account_id": f"a{num}", "customer_id": cid, "kind": kind, "balance": balance})
    accounts.sort(key=lambda a: int(a["account_id"][1:]))
    return {"customers": customers, "accounts": accounts}
