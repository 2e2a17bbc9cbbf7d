"""InputError's message: one line, each piece cut to a readable length, the fields kept whole."""

import pickle

from membench.core.errors import ECHO_CHARACTERS, PROBLEM_CHARACTERS, InputError, one_line, shorten


def test_a_short_message_is_unchanged():
    assert str(InputError("a.csv", "bad value 'x'", "line 3")) == "a.csv, line 3: bad value 'x'"
    assert str(InputError(None, "bad")) == "<input>: bad"


def test_long_pieces_keep_their_head_and_tail_and_say_how_long_they_were():
    value = "v" * 20_000_000
    error = InputError(
        "/data/" + "d" * 1000 + "/jobs.csv", f"column a: {value!r} is not an integer", "w" * 300
    )
    message = str(error)
    assert len(message) < ECHO_CHARACTERS * 2 + PROBLEM_CHARACTERS + 200
    assert message.startswith("/data/ddd") and "/jobs.csv, www" in message
    assert "(1015 characters)" in message and "(300 characters)" in message
    assert f"({len(error.problem)} characters)" in message and message.endswith("' is not an integer")
    assert error.problem.count("v") == len(value)  # the fields keep what was given


def test_the_message_is_one_line_whatever_the_pieces_hold():
    error = InputError("dir\nname/a.csv", "bad\r\nvalue \x1b[31m\u2028 \x85", "line 2")
    assert str(error) == "dir\\nname/a.csv, line 2: bad\\r\\nvalue \\x1b[31m\\u2028 \\x85"
    assert len(str(error).splitlines()) == 1


def test_shorten_and_one_line():
    assert shorten("x" * 200) == "x" * 200
    cut = shorten("ab" * 150, limit=40)
    assert cut == "ab" * 15 + " ... (300 characters) ... " + "ab" * 5
    assert one_line("a\tb") == "a\\tb"


def test_it_pickles_by_its_fields():
    error = pickle.loads(pickle.dumps(InputError("a.csv", "p" * 1000, "line 2")))
    assert (error.path, error.problem, error.where) == ("a.csv", "p" * 1000, "line 2")
    assert str(error) == str(InputError("a.csv", "p" * 1000, "line 2"))
