def run() -> str:
    return "incdemo"
