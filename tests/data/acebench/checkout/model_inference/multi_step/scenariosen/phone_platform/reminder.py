class ReminderApi:
    def __init__(self):
        self.max_capacity = 6
        self.reminder_list = {
            1: {"reminder_id": 501, "title": "Flight", "description": "Fly at dawn.", "time": "2024-05-03 06:00", "notified": False},
        }
        self.reminder_id_counter = 1
