SYSTEM_PROMPT_BASE_EN = """Invented user prompt. You play this instruction: {instruction}
Write 'finish conversation' when it is done."""

SYSTEM_PROMPT_TRAVEL_EN = """Invented travel user prompt: {instruction}"""


class APIUSER:
    def get_init_prompt(self, question):
        if self.language == "zh":
            self.messages = [{"role": "user", "content": "有什么需要帮忙的吗？"}]
        elif self.language == "en":
            self.messages = [{"role": "user", "content": "Anything I can do for you?"}]
