"""Plain-Python models the table functions and the recursion are checked against.

Test code only: the installed package never imports it.
"""
