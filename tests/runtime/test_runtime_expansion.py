"""`$(NAME)` expansion in the program's argv (runtime/expansion.py): Kubernetes' rules."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime.expansion import escape, expand, expand_argv, expand_with

VARIABLES = {
    "VAR_A": "A",
    "VAR_B": "B",
    "JOB_NAME": "worker",
    "TASK_INDEX": "1",
    "PS_HOSTS": "10.0.0.1:2222",
    "WORKER_HOSTS": "10.0.0.2:2222,10.0.0.3:2222",
    "EMPTY": "",
    "NESTED": "$(VAR_A)",
    "DOLLARS": "$$",
}


@pytest.mark.parametrize(
    ("text", "expanded"),
    [
        pytest.param("$(VAR_A)", "A", id="whole_argument"),
        pytest.param("--job_name=$(JOB_NAME)", "--job_name=worker", id="inside_an_argument"),
        pytest.param("$(VAR_A)$(VAR_B)", "AB", id="two_adjacent"),
        pytest.param("$(VAR_A)-$(VAR_B)-$(VAR_A)", "A-B-A", id="several_in_one_argument"),
        pytest.param("--x=$(EMPTY).", "--x=.", id="empty_value"),
        pytest.param("$(NESTED)", "$(VAR_A)", id="values_are_not_expanded_again"),
        pytest.param("$(DOLLARS)", "$$", id="values_keep_their_dollars"),
    ],
)
def test_a_reference_to_a_set_variable_becomes_its_value(text, expanded):
    assert expand(text, VARIABLES) == expanded


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("train.py", id="plain"),
        pytest.param("--lr=0.1", id="flag"),
        pytest.param("$", id="lone_dollar"),
        pytest.param("cost$", id="trailing_dollar"),
        pytest.param("$VAR_A", id="shell_style"),
        pytest.param("${VAR_A}", id="shell_braces"),
        pytest.param("a$)b", id="dollar_before_closer"),
        pytest.param("(VAR_A)", id="no_operator"),
    ],
)
def test_text_without_references_stays_as_written(text):
    assert expand(text, VARIABLES) == text


@pytest.mark.parametrize(
    ("text", "expanded"),
    [
        pytest.param("$$(VAR_A)", "$(VAR_A)", id="escaped_reference"),
        pytest.param("--x=$$(JOB_NAME)", "--x=$(JOB_NAME)", id="escaped_inside_an_argument"),
        pytest.param("$$$(VAR_A)", "$A", id="escape_then_reference"),
        pytest.param("$$$$(VAR_A)", "$$(VAR_A)", id="two_escapes"),
        pytest.param("$$", "$", id="escape_alone"),
        pytest.param("$$$", "$$", id="escape_and_lone_dollar"),
        pytest.param("$$$$$$$(GOOD_ODDS)", "$$$$(GOOD_ODDS)", id="odd_dollars_unset_name"),
        pytest.param("$$VAR_A", "$VAR_A", id="escape_before_plain_text"),
    ],
)
def test_double_dollar_is_one_literal_dollar(text, expanded):
    assert expand(text, VARIABLES) == expanded


@pytest.mark.parametrize(
    ("text", "expanded"),
    [
        pytest.param("$(UNKNOWN)", "$(UNKNOWN)", id="unknown_name"),
        pytest.param("$(UNKNOWN)-$(VAR_A)", "$(UNKNOWN)-A", id="unknown_beside_known"),
        pytest.param("$(var_a)", "$(var_a)", id="names_are_case_sensitive"),
        pytest.param("$()", "$()", id="empty_name"),
        pytest.param("$(VAR_A", "$(VAR_A", id="unterminated"),
        pytest.param("x$(", "x$(", id="opener_at_the_end"),
        pytest.param("$(VAR_A$(VAR_B", "$(VAR_A$(VAR_B", id="two_unterminated"),
        pytest.param("$(VAR_A $(VAR_B)", "$(VAR_A $(VAR_B)", id="name_runs_to_the_first_closer"),
        pytest.param("$(VAR_A))", "A)", id="extra_closer"),
    ],
)
def test_unknown_empty_and_unterminated_references_stay_as_written(text, expanded):
    assert expand(text, VARIABLES) == expanded


def test_the_seed_era_request_args_become_the_replicas_flags():
    args = [
        "--ps_hosts=$(PS_HOSTS)",
        "--worker_hosts=$(WORKER_HOSTS)",
        "--job_name=$(JOB_NAME)",
        "--task_index=$(TASK_INDEX)",
    ]
    assert expand_argv(["python3", "train.py", *args], VARIABLES) == [
        "python3",
        "train.py",
        "--ps_hosts=10.0.0.1:2222",
        "--worker_hosts=10.0.0.2:2222,10.0.0.3:2222",
        "--job_name=worker",
        "--task_index=1",
    ]


def test_each_argument_is_expanded_on_its_own():
    """A `$(` in one argument never pairs with a `)` in the next."""
    assert expand_argv(["$(VAR_A", ")"], VARIABLES) == ["$(VAR_A", ")"]
    assert expand_argv([], VARIABLES) == []


def test_the_lookup_decides_per_name_and_none_keeps_the_reference():
    asked = []

    def lookup(name):
        asked.append(name)
        return "shown" if name == "VAR_A" else None

    assert expand_with("$(VAR_A) $(SECRET) $$(VAR_B)", lookup) == "shown $(SECRET) $(VAR_B)"
    assert asked == ["VAR_A", "SECRET"]


def expand_as_kubernetes_does(text, variables):
    """Oracle: Kubernetes' `expansion.Expand` (third_party/forked/golang), ported line by line."""
    buf, checkpoint, cursor = [], 0, 0
    while cursor < len(text):
        if text[cursor] == "$" and cursor + 1 < len(text):
            buf.append(text[checkpoint:cursor])
            rest = text[cursor + 1 :]
            if rest[0] == "$":
                read, is_var, advance = rest[0:1], False, 1
            elif rest[0] == "(":
                for i in range(1, len(rest)):
                    if rest[i] == ")":
                        read, is_var, advance = rest[1:i], True, i + 1
                        break
                else:
                    read, is_var, advance = "$(", False, 1
            else:
                read, is_var, advance = "$" + rest[0], False, 1
            if is_var:
                buf.append(variables[read] if read in variables else f"$({read})")
            else:
                buf.append(read)
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(buf) + text[checkpoint:]


# Pieces that make references likely: operators, brackets, and set and unset names.
TEXT = st.lists(st.sampled_from([*"$()x-=", "VAR_A", "VAR_B", "UNSET", "$("]), max_size=20).map(
    "".join
)


@given(TEXT)
def test_expansion_matches_kubernetes_on_any_text(text):
    assert expand(text, VARIABLES) == expand_as_kubernetes_does(text, VARIABLES)


@given(TEXT)
def test_an_escaped_text_comes_back_unchanged_from_one_expansion(text):
    """What the manifest must do so that Kubernetes' own expansion leaves the argv to the pod."""
    assert expand(escape(text), VARIABLES) == text
    assert expand_as_kubernetes_does(escape(text), VARIABLES) == text
