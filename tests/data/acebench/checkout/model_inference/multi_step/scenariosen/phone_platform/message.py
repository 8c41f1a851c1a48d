class MessageApi:
    def __init__(self):
        self.max_capacity = 6
        self.user_list = {
            "Ann": {"user_id": "U1", "phone_number": "111", "occupation": "Baker"},
            "Ben": {"user_id": "U2", "phone_number": "222", "occupation": "Pilot"},
            "Cy": {"user_id": "U3", "phone_number": "333", "occupation": "Nurse"},
        }
        self.inbox = {
            1: {"sender_id": "U1", "receiver_id": "U2", "message": "Bread at noon?", "time": "2024-05-01"},
            2: {"sender_id": "U2", "receiver_id": "U1", "message": "Yes, noon.", "time": "2024-05-02"},
        }
        self.message_id_counter = 2
