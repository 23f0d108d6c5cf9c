"""`tectl completion bash|zsh`: a shell completion script made from tectl's own parser, so it
knows every command, plug-in commands too, and their options and choices.

    source <(tectl completion bash)     # or put it in ~/.bash_completion.d/tectl
    source <(tectl completion zsh)      # zsh, through its bash completion layer

Words after a command complete to its subcommands, then its options (`-` first), then the
choices of the option just typed; anything else falls back to file names.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from controller.cli.commands import Commands

SHELLS = ("bash", "zsh")


def command_tree(
    parser: argparse.ArgumentParser, path: str = ""
) -> dict[str, dict[str, list[str]]]:
    """Per command path ("", "routes", "routes diff"): its subcommands, its options, the
    words it may take next (subcommands, choices of positionals) and, per option that has
    them, its choices (keys "=OPTION")."""
    subs: list[str] = []
    options: list[str] = []
    positional: list[str] = []
    node: dict[str, list[str]] = {}
    out: dict[str, dict[str, list[str]]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                subs.append(name)
                out.update(command_tree(child, f"{path} {name}".strip()))
        elif not action.option_strings and action.choices:
            positional.extend(str(c) for c in action.choices)
        elif action.option_strings and action.help != argparse.SUPPRESS:
            options.extend(action.option_strings)
            choices = action.choices
            if "--fabric" in action.option_strings:  # a preset, or a file (the fallback)
                from controller.model.clos import PRESETS

                choices = sorted(PRESETS)
            if choices:
                for opt in action.option_strings:
                    node[f"={opt}"] = [str(c) for c in choices]
    node["subcommands"], node["options"], node["words"] = subs, options, subs + positional
    out[path] = node
    return out


def bash_script(parser: argparse.ArgumentParser) -> str:
    """The completion function `_tectl` for bash (zsh: after bashcompinit)."""
    tree = command_tree(parser)
    cases = []
    for path, node in sorted(tree.items()):
        for key, words in sorted(node.items()):
            pattern, reply = shlex.quote(f"{path}|{key}"), shlex.quote(" ".join(words))
            cases.append(f"        {pattern}) echo {reply} ;;")
    body = "\n".join(cases)
    return f"""# tectl completion (bash; zsh after `autoload -U +X bashcompinit && bashcompinit`)
_tectl_words() {{
    case "$1" in
{body}
    esac
}}
_tectl() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}" path="" i w
    for ((i = 1; i < COMP_CWORD; i++)); do
        w="${{COMP_WORDS[i]}}"
        case " $(_tectl_words "$path|subcommands") " in
            *" $w "*) path="${{path:+$path }}$w" ;;
        esac
    done
    local choices
    choices="$(_tectl_words "$path|=$prev")"
    if [[ -n "$choices" ]]; then
        COMPREPLY=($(compgen -W "$choices" -- "$cur"))
    elif [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$(_tectl_words "$path|options")" -- "$cur"))
    else
        COMPREPLY=($(compgen -W "$(_tectl_words "$path|words")" -- "$cur"))
    fi
}}
complete -o default -F _tectl tectl
"""


def cmd_completion(args: argparse.Namespace, root: argparse.ArgumentParser) -> int:
    script = bash_script(root)
    if args.shell == "zsh":
        script = "autoload -U +X bashcompinit && bashcompinit\n" + script
    sys.stdout.write(script)
    return 0


def register(cli: Commands) -> None:
    """Add `completion` to `tectl`."""
    p = cli.sub.add_parser(
        "completion", help="print a shell completion script: source <(tectl completion bash)"
    )
    p.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    root = cli.root
    p.set_defaults(func=lambda args: cmd_completion(args, root))
