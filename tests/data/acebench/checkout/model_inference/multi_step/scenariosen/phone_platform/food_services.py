class FoodPlatform:
    def __init__(self):
        self.users = {
            "Ann": {"user_id": "F1", "password": "ann-pw", "balance": 100.0},
            "Ben": {"user_id": "F2", "password": "ben-pw", "balance": 20.0},
        }
        self.merchant_list = {
            "Cy's Cakes": {"merchant_id": "M1", "service_type": "Cakes",
                           "menu": [{"product": "Plum Cake", "price": 12.5}, {"product": "Tart", "price": 7.0}]},
        }
        self.logged_in_users = []
        self.orders = []
