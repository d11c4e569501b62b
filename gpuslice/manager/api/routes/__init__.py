"""One router per resource; handlers: dependency → one service call → response model."""
