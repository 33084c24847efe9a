print("storectl")
