from sqlext.statements import split_statements


def test_splits_on_semicolons_outside_strings_and_comments():
    source = "SELECT ';' AS a;\n-- a comment; with a semicolon\nSELECT 2 /* ; */ AS b;\n\n  SELECT `x;y` FROM t"
    statements = split_statements(source)
    assert [s.text for s in statements] == [
        "SELECT ';' AS a", "SELECT 2 /* ; */ AS b", "SELECT `x;y` FROM t"]
    assert [(s.line, s.column) for s in statements] == [(1, 1), (3, 1), (5, 3)]


def test_comment_only_chunks_are_not_statements():
    assert split_statements("-- nothing here;\n/* nor here */;\n") == []


def test_escaped_quote_does_not_end_a_string():
    statements = split_statements("SELECT 'it\\'s; fine'; SELECT 1")
    assert [s.text for s in statements] == ["SELECT 'it\\'s; fine'", "SELECT 1"]
