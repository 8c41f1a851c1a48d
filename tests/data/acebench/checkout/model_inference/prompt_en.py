BASE_PROMPT_EN = """Invented rules for the phone: log in to the device before touching its apps."""
TRAVEL_PROMPT_EN = """Invented rules for travel."""
