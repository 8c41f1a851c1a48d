"""Seed data of the built-in `retail` domain: an online store's users, catalogue, payment methods
and orders. Deterministic for a given (scale, seed); pure stdlib.

At scale 1: 60 users, 25 products with ~140 variants, ~240 orders. `scale` multiplies every count
(product names get a series suffix beyond the first copy); ids stay unique at any scale.
"""

from __future__ import annotations

import random

FIRST_NAMES = [
    "Ava", "Liam", "Mia", "Noah", "Zoe", "Ethan", "Isla", "Omar", "Lena", "Ravi", "Nora", "Hugo",
    "Chloe", "Mateo", "Priya", "Jonas", "Elena", "Kofi", "Sara", "Diego", "Yuki", "Felix", "Amara",
    "Leo", "Ines", "Tariq", "Maya", "Oscar", "Hana", "Ivan", "Clara", "Samir", "Julia", "Arjun",
    "Freya", "Marco", "Aisha", "Lucas", "Nadia", "Theo",
]
LAST_NAMES = [
    "Lee", "Garcia", "Novak", "Okafor", "Silva", "Khan", "Moreau", "Tanaka", "Berg", "Rossi",
    "Patel", "Kim", "Haddad", "Larsen", "Costa", "Fischer", "Mensah", "Ortiz", "Ivanova", "Walsh",
    "Nguyen", "Dubois", "Sato", "Romero", "Ali", "Brennan", "Jensen", "Lopez", "Adeyemi", "Weber",
]
STREETS = [
    "Maple Street", "Cedar Avenue", "Harbor Road", "Willow Lane", "Sunset Boulevard", "Elm Court",
    "Lakeview Drive", "Pine Street", "Orchard Way", "River Road", "Hillside Avenue", "Park Place",
    "Birch Lane", "Market Street", "Meadow Drive", "Spruce Way",
]
# (city, state, first three digits of its zip codes)
CITIES = [
    ("Portland", "OR", "972"), ("Austin", "TX", "787"), ("Denver", "CO", "802"), ("Columbus", "OH", "432"),
    ("Raleigh", "NC", "276"), ("Madison", "WI", "537"), ("Tucson", "AZ", "857"), ("Boise", "ID", "837"),
    ("Albany", "NY", "122"), ("Richmond", "VA", "232"), ("Omaha", "NE", "681"), ("Spokane", "WA", "992"),
]
CARD_BRANDS = ["visa", "mastercard", "amex"]

# name, base price, option axes
CATALOGUE = [
    ("Desk Lamp", 39.0, {"color": ["black", "white", "brass"], "bulb": ["LED", "halogen"]}),
    ("Running Shoes", 89.0, {"size": ["7", "8", "9", "10", "11"], "color": ["grey", "navy", "red"]}),
    ("Water Bottle", 18.0, {"capacity": ["500ml", "750ml", "1L"], "material": ["steel", "plastic"]}),
    ("Backpack", 64.0, {"color": ["black", "olive", "navy"], "capacity": ["20L", "30L"]}),
    ("Wireless Earbuds", 119.0, {"color": ["white", "black"], "case": ["standard", "wireless charging"]}),
    ("Yoga Mat", 32.0, {"thickness": ["4mm", "6mm", "8mm"], "color": ["purple", "teal", "grey"]}),
    ("Coffee Grinder", 54.0, {"type": ["blade", "burr"], "color": ["silver", "black"]}),
    ("Electric Kettle", 46.0, {"capacity": ["1L", "1.7L"], "material": ["glass", "steel"]}),
    ("T-Shirt", 21.0, {"size": ["S", "M", "L", "XL"], "color": ["white", "black", "blue"]}),
    ("Hoodie", 48.0, {"size": ["S", "M", "L", "XL"], "color": ["grey", "green"]}),
    ("Office Chair", 229.0, {"color": ["black", "grey"], "armrests": ["fixed", "adjustable"]}),
    ("Mechanical Keyboard", 99.0, {"switch": ["linear", "tactile", "clicky"], "layout": ["full", "tenkeyless"]}),
    ("Bluetooth Speaker", 72.0, {"color": ["red", "blue", "black"], "waterproof": ["yes", "no"]}),
    ("Smart Watch", 199.0, {"strap": ["leather", "silicone"], "size": ["40mm", "44mm"]}),
    ("Tent", 179.0, {"capacity": ["2-person", "4-person"], "season": ["3-season", "4-season"]}),
    ("Sunglasses", 58.0, {"frame": ["round", "square"], "lens": ["polarized", "standard"]}),
    ("Cookware Set", 149.0, {"pieces": ["5", "8", "12"], "coating": ["ceramic", "stainless"]}),
    ("Jigsaw Puzzle", 24.0, {"pieces": ["500", "1000", "2000"], "theme": ["mountains", "city", "ocean"]}),
    ("Air Purifier", 159.0, {"room": ["small", "large"], "filter": ["HEPA", "carbon"]}),
    ("Notebook", 9.0, {"pages": ["120", "200"], "ruling": ["lined", "dotted", "blank"]}),
    ("Bike Helmet", 61.0, {"size": ["S", "M", "L"], "color": ["white", "black", "orange"]}),
    ("Headphones", 139.0, {"style": ["over-ear", "on-ear"], "color": ["black", "silver"]}),
    ("Plant Pot", 16.0, {"size": ["small", "medium", "large"], "material": ["ceramic", "terracotta"]}),
    ("Phone Case", 19.0, {"model": ["A12", "A13", "A14"], "color": ["clear", "black"]}),
    ("Digital Camera", 449.0, {"resolution": ["20MP", "24MP"], "color": ["black", "silver"]}),
]

STATUSES = [  # (status, weight)
    ("pending", 26), ("processed", 18), ("delivered", 36), ("cancelled", 8),
    ("return requested", 6), ("exchange requested", 6),
]
CANCEL_REASONS = ["no longer needed", "ordered by mistake"]


def _unique_numbers(rng: random.Random, count: int, digits: int) -> list[int]:
    """`count` distinct numbers of `digits` digits (more digits when a large scale needs them)."""
    while 9 * 10 ** (digits - 1) < 2 * count:
        digits += 1
    return rng.sample(range(10 ** (digits - 1), 10 ** digits), count)


def _combos(axes: dict[str, list[str]]) -> list[dict[str, str]]:
    out: list[dict[str, str]] = [{}]
    for axis, values in axes.items():
        out = [dict(c, **{axis: v}) for c in out for v in values]
    return out


def _address(rng: random.Random) -> dict:
    city, state, prefix = rng.choice(CITIES)
    return {
        "address1": f"{rng.randint(10, 9899)} {rng.choice(STREETS)}",
        "address2": rng.choice(["", "", "", f"Apt {rng.randint(1, 40)}", f"Suite {rng.randint(100, 499)}"]),
        "city": city,
        "state": state,
        "zip": f"{prefix}{rng.randint(0, 99):02d}",
        "country": "USA",
    }


def _products(rng: random.Random, scale: int) -> tuple[list[dict], list[dict]]:
    n = len(CATALOGUE) * scale
    product_ids = _unique_numbers(rng, n, 5)
    variant_ids = iter(_unique_numbers(rng, n * 12, 6))
    products, variants = [], []
    for k in range(n):
        name, base, axes = CATALOGUE[k % len(CATALOGUE)]
        copy = k // len(CATALOGUE)
        if copy:
            name = f"{name} Series {copy + 1}"
        pid = f"P{product_ids[k]}"
        products.append({"product_id": pid, "name": name})
        combos = _combos(axes)
        chosen = rng.sample(combos, min(len(combos), rng.randint(4, 7)))
        chosen.sort(key=combos.index)
        for options in chosen:
            variants.append({
                "item_id": str(next(variant_ids)),
                "product_id": pid,
                "options": options,
                "price": round(base * rng.uniform(0.85, 1.15), 2),
                "available": rng.random() < 0.85,
            })
    return products, variants


def generate(scale: int = 1, seed: int = 0) -> dict[str, list[dict]]:
    if scale < 1:
        raise ValueError("scale must be at least 1")
    rng = random.Random(seed)
    products, variants = _products(rng, scale)
    product_names = {p["product_id"]: p["name"] for p in products}

    n_users = 60 * scale
    users, payment_methods = [], []
    user_suffixes = _unique_numbers(rng, n_users, 4)
    pm_numbers = iter(_unique_numbers(rng, n_users * 4, 7))
    seen_name_zip: set[tuple] = set()
    seen_email: set[str] = set()
    user_pms: dict[str, list[dict]] = {}
    for i in range(n_users):
        while True:
            first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
            address = _address(rng)
            if (first, last, address["zip"]) not in seen_name_zip:
                break
        seen_name_zip.add((first, last, address["zip"]))
        user_id = f"{first}_{last}_{user_suffixes[i]}".lower()
        email = f"{first}.{last}{user_suffixes[i] % 100}@example.com".lower()
        while email in seen_email:
            email = email.replace("@", f"{rng.randint(0, 9)}@")
        seen_email.add(email)
        users.append({"user_id": user_id, "first_name": first, "last_name": last, "email": email, "address": address})

        pms = []
        kinds = [k for k, p in (("credit_card", 0.7), ("gift_card", 0.4), ("paypal", 0.35)) if rng.random() < p]
        if rng.random() < 0.15 and "credit_card" in kinds:
            kinds.append("credit_card")
        if not kinds:
            kinds = [rng.choice(["credit_card", "paypal"])]
        for kind in kinds:
            pm = {"payment_method_id": f"{kind}_{next(pm_numbers)}", "user_id": user_id, "kind": kind,
                  "brand": None, "last_four": None, "balance": None}
            if kind == "credit_card":
                pm["brand"] = rng.choice(CARD_BRANDS)
                pm["last_four"] = f"{rng.randint(0, 9999):04d}"
            elif kind == "gift_card":
                pm["balance"] = float(rng.choice([0, 15, 25, 40, 50, 75, 100, 150, 200, 250, 300]) + rng.choice([0, 0, 0.5, 0.25]))
            pms.append(pm)
        payment_methods.extend(pms)
        user_pms[user_id] = pms

    per_user = [rng.randint(2, 6) for _ in users]
    order_numbers = iter(_unique_numbers(rng, sum(per_user), 7))
    orders = []
    statuses, weights = zip(*STATUSES)
    for user, count in zip(users, per_user):
        for _ in range(count):
            status = rng.choices(statuses, weights)[0]
            picks = rng.sample(variants, rng.choices([1, 2, 3, 4], [35, 35, 20, 10])[0])
            items = [{"item_id": v["item_id"], "product_id": v["product_id"], "name": product_names[v["product_id"]],
                      "options": v["options"], "price": v["price"]} for v in picks]
            total = round(sum(v["price"] for v in picks), 2)
            pm = rng.choice(user_pms[user["user_id"]])["payment_method_id"]
            history = [{"type": "payment", "payment_method_id": pm, "amount": total}]
            request = None
            if status == "cancelled":
                history.append({"type": "refund", "payment_method_id": pm, "amount": total})
                request = {"type": "cancel", "reason": rng.choice(CANCEL_REASONS)}
            elif status == "return requested":
                back = rng.sample(items, rng.randint(1, len(items)))
                request = {"type": "return", "item_ids": [it["item_id"] for it in back], "payment_method_id": pm,
                           "amount": round(sum(it["price"] for it in back), 2)}
            elif status == "exchange requested":
                it = rng.choice(items)
                options = [v for v in variants if v["product_id"] == it["product_id"]
                           and v["item_id"] != it["item_id"] and v["available"]]
                if options:
                    new = rng.choice(options)
                    request = {"type": "exchange", "item_ids": [it["item_id"]], "new_item_ids": [new["item_id"]],
                               "payment_method_id": pm, "price_difference": round(new["price"] - it["price"], 2)}
                else:
                    status = "delivered"
            shipped = status not in ("pending", "cancelled")
            month = rng.randint(1, 5) if shipped or status == "cancelled" else 6
            orders.append({
                "order_id": f"#W{next(order_numbers):07d}",
                "user_id": user["user_id"],
                "status": status,
                "placed_on": f"2025-{month:02d}-{rng.randint(1, 28):02d}",
                "address": dict(user["address"]) if rng.random() < 0.85 else _address(rng),
                "items": items,
                "total": total,
                "payment_method_id": pm,
                "payment_history": history,
                "tracking_id": str(rng.randint(10 ** 9, 10 ** 10 - 1)) if shipped else None,
                "items_modified": False,
                "request": request,
            })
    orders.sort(key=lambda o: o["order_id"])
    return {
        "users": users,
        "payment_methods": payment_methods,
        "products": products,
        "variants": variants,
        "orders": orders,
    }
