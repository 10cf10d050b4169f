"""A model family that lives entirely in this test folder (issue 26).

A package so pytest imports the test module as ``toy_family.test_pixart_family`` and the family as
``toy_family.pixart`` (the name its registry entry's options path uses); nothing is added to ``sys.path``.
"""
