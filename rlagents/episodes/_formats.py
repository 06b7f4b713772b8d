"""Episode formats: how an episode becomes the token ids a model reads and writes.

A format is a plug-in of the episode core with one job: token ids. Two ship.

`MarkerFormat`, the project's own text format (the default): `<bos>question<call>...</call>
<obs>...</obs>...<answer>...</answer>` with the markers as single tokens of the tokenizer.

`ChatFormat`, a model's own chat template: the episode is a conversation (a system message, the
question as the user's message, each action an assistant message, with `tool_calls` for a call,
each tool result a `tool` message) rendered by the tokenizer's `apply_chat_template(...,
tools=...)`, the tools given as JSON schemas; calls are read in the template's own syntax
(`episodes.SYNTAXES`: JSON in `<tool_call>` tags, or Llama-3.1 JSON).

Exact tokens, never re-tokenised: a rollout's buffer holds the prompt as the template renders
it, then each turn's tokens as the policy sampled them (up to and including the turn-end token
it stopped on), then what the template renders after that turn up to the next assistant
generation prompt (`observation_ids`). That delta is read off the template itself: the text of
the conversation with the tool message and a generation prompt, minus the text of the
conversation that ends with the assistant's turn, plus whatever the template writes after the
turn-end token (Qwen's newline). Earlier text is never tokenised again, so the policy's tokens,
and their log-probs, are the ones it sampled. Demonstrations (`encode`) are the same pieces
with the assistant turns as the template renders them.

Host code.
"""

import dataclasses
import json
from typing import Any, Callable, Sequence

import numpy as np

from rlagents import tools as tools_lib
from rlagents.episodes import _core
from rlagents.episodes import _encode
from rlagents.episodes import _syntax

FORMATS = ("marker", "chat")
DEFAULT_SYSTEM_PROMPT = ("You are a helpful assistant. Call a tool when it helps; "
                         "reply with the final answer only.")
_PROBE_TOOL = "probe_tool_name"
_PROBE_DESCRIPTION = "probe tool description"
_PROBE_TEXT = "probe assistant text"


class FormatError(ValueError):
  """A tokenizer or template a format cannot use; the message names the file or field."""


class MarkerFormat:
  """The marker text format (see `rlagents.tools`); the ids the rollout always used.

  Args:
    tokenizer: a tokenizer with every marker as one token.
  """
  name = "marker"
  syntax = "marker"

  def __init__(self, tokenizer):
    self.tokenizer = tokenizer

  @property
  def stop_tokens(self) -> tuple[int, ...]:
    """The ids a segment ends on: `</call>`, `</answer>`, `<eos>`."""
    return tuple(self.tokenizer.convert_tokens_to_ids(list(_core.STOP_MARKERS)))

  def prompt_ids(self, task) -> list[int]:
    return _encode.encode_text(self.tokenizer, _core.prompt_text(task))

  def read_segment(self, ids) -> tuple[str, bool]:
    """`(text, finished)`; the marker syntax reads an unfinished segment itself (`advance`)."""
    return self.tokenizer.decode(ids), True

  def observation_ids(self, episode: _core.Episode, observation: str) -> list[int]:
    del episode
    return _encode.encode_text(self.tokenizer, observation)

  def encode(self, episode: _core.Episode, max_length: int) -> tuple[np.ndarray, np.ndarray]:
    return _encode.encode(episode, self.tokenizer, max_length)

  def adopt(self, episodes: Sequence[_core.Episode], toolbox_for) -> list[_core.Episode]:
    del toolbox_for
    return list(episodes)


def _render(tokenizer, messages, tools, *, generation_prompt: bool, source: str) -> str:
  try:
    return tokenizer.apply_chat_template(messages, tools=tools, tokenize=False,
                                         add_generation_prompt=generation_prompt)
  except Exception as error:  # the template's own (jinja) errors: name the template
    raise FormatError(f"{source}: chat_template failed to render {len(messages)} message(s) "
                      f"({type(error).__name__}: {error})") from None


def check_chat_template(tokenizer, source: str) -> None:
  """Raises `FormatError` unless `tokenizer` has a chat template that renders tools.

  Args:
    tokenizer: a transformers tokenizer.
    source: what to name (the checkpoint directory).
  """
  if not getattr(tokenizer, "chat_template", None):
    raise FormatError(f"{source}: the tokenizer has no chat_template (tokenizer_config.json or "
                      "chat_template.jinja); format='chat' renders episodes with it")
  probe = tools_lib.ToolSpec(_PROBE_TOOL, _PROBE_DESCRIPTION, {"type": "string"})
  text = _render(tokenizer, [{"role": "user", "content": "q"}], [_syntax.tool_schema(probe)],
                 generation_prompt=True, source=source)
  if _PROBE_TOOL not in text or _PROBE_DESCRIPTION not in text:
    raise FormatError(f"{source}: the chat_template does not render tools (apply_chat_template"
                      "(..., tools=...) left the tool's name and description out)")


def detect_syntax(tokenizer, source: str) -> str:
  """The call syntax the template writes an assistant's tool call in.

  Raises:
    FormatError: it writes one the parser does not know; the message shows the rendering.
  """
  call = {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
      "name": _PROBE_TOOL, "arguments": {_syntax.INPUT_ARGUMENT: "x"}}}]}
  user = [{"role": "user", "content": "q"}]
  before = _render(tokenizer, user, None, generation_prompt=True, source=source)
  after = _render(tokenizer, user + [call], None, generation_prompt=False, source=source)
  written = after[len(before):] if after.startswith(before) else after
  if tools_lib.JSON_CALL_OPEN in written:
    return "hermes"
  for special in tokenizer.all_special_tokens:
    written = written.replace(special, "\n") if special else written
  for line in written.splitlines():
    try:
      value = json.loads(line.strip() or "null")
    except json.JSONDecodeError:
      continue
    if isinstance(value, dict) and value.get("name") == _PROBE_TOOL and "parameters" in value:
      return "llama3_json"
  raise FormatError(f"{source}: the chat_template writes tool calls in a syntax the parser does "
                    f"not know ({written.strip()[:80]!r}); known: "
                    f"{', '.join(_syntax.CHAT_SYNTAXES)} (set chat.syntax)")


def _turn_end(tokenizer, source: str) -> str:
  """The special token the template closes an assistant turn with (the sampler stops on it)."""
  text = _render(tokenizer, [{"role": "user", "content": "q"},
                             {"role": "assistant", "content": _PROBE_TEXT}], None,
                 generation_prompt=False, source=source)
  tail = text[text.index(_PROBE_TEXT) + len(_PROBE_TEXT):] if _PROBE_TEXT in text else ""
  special = [t for t in tokenizer.all_special_tokens if t and t in tail]
  if not special:
    raise FormatError(f"{source}: the chat_template ends an assistant turn with no special token "
                      f"({tail[:40]!r}); the sampler needs one to stop on")
  return min(special, key=tail.index)


def _tool_message(result: tools_lib.ToolResult) -> dict[str, Any]:
  message = {"role": "tool", "content": result.observation}
  if result.call is not None:
    message["name"] = result.call.name
  return message


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChatSettings:
  """The chat format's settings (`--config.chat.*`).

  Attributes:
    syntax: the tool-call syntax: 'auto' (read off the template: `<tool_call>` tags are
      'hermes', a JSON object with `parameters` is 'llama3_json'), or one of those names.
    system_prompt: the system message ('' for none; the template still lists the tools).
  """
  syntax: str = "auto"
  system_prompt: str = DEFAULT_SYSTEM_PROMPT

  def __post_init__(self):
    if self.syntax != "auto" and self.syntax not in _syntax.CHAT_SYNTAXES:
      raise ValueError(f"chat.syntax: tool-call syntax {self.syntax!r} is not known to the "
                       f"parser (known: auto, {', '.join(_syntax.CHAT_SYNTAXES)})")


class ChatFormat:
  """Episodes as conversations in the tokenizer's own chat template; see the module docstring.

  Args:
    tokenizer: a transformers tokenizer with a chat template that renders tools.
    tools_for: `tools_for(task)` -> the specs of that task's tools (listed in the prompt).
    settings: the syntax and system prompt.
    source: what errors name (the checkpoint directory).

  Raises:
    FormatError: no chat template, a template that cannot render tools, a tool-call syntax
      the parser does not know, or no turn-end token; one line naming `source` or the field.
  """
  name = "chat"

  def __init__(self, tokenizer, tools_for: Callable[[Any], Sequence[tools_lib.ToolSpec]],
               settings: ChatSettings = ChatSettings(), *, source: str = "tokenizer"):
    check_chat_template(tokenizer, source)
    self.tokenizer, self.tools_for, self.settings, self.source = (
        tokenizer, tools_for, settings, source)
    self.syntax = (detect_syntax(tokenizer, source) if settings.syntax == "auto"
                   else settings.syntax)
    self._syntax = _syntax.call_syntax(self.syntax, field="chat.syntax")
    self.turn_end = _turn_end(tokenizer, source)
    ids = [tokenizer.convert_tokens_to_ids(self.turn_end)]
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
      ids.append(tokenizer.eos_token_id)
    self.stop_tokens = tuple(ids)

  # ---- conversations ----

  def tools(self, task) -> list[dict[str, Any]]:
    """The JSON schemas of the task's tools, as `apply_chat_template(tools=...)` takes them."""
    return [_syntax.tool_schema(spec) for spec in self.tools_for(task)]

  def prompt_messages(self, task) -> list[dict[str, Any]]:
    system = ([{"role": "system", "content": self.settings.system_prompt}]
              if self.settings.system_prompt else [])
    return system + [{"role": "user", "content": task.prompt}]

  def messages(self, episode: _core.Episode) -> list[dict[str, Any]]:
    """The conversation of an episode: prompt, then each finished turn and its tool result."""
    messages = self.prompt_messages(episode.task)
    for action in episode.actions:
      if action.kind == "truncated":
        break
      messages.append(self._syntax.message(action.text))
      if action.result is not None:
        messages.append(_tool_message(action.result))
    return messages

  def render(self, messages, task, *, generation_prompt: bool) -> str:
    """The template's text of `messages` with `task`'s tools."""
    return _render(self.tokenizer, messages, self.tools(task),
                   generation_prompt=generation_prompt, source=self.source)

  def _ids(self, text: str) -> list[int]:
    return _encode.encode_text(self.tokenizer, text)

  def _after_turn(self, messages, task) -> tuple[str, str]:
    """`(text of messages that end with an assistant turn, what follows its turn-end token)`."""
    text = self.render(messages, task, generation_prompt=False)
    end = text.rfind(self.turn_end)
    if end < 0:
      raise FormatError(f"{self.source}: the chat_template wrote an assistant turn without "
                        f"{self.turn_end!r}")
    return text, text[end + len(self.turn_end):]

  # ---- the rollout's pieces ----

  def prompt_ids(self, task) -> list[int]:
    return self._ids(self.render(self.prompt_messages(task), task, generation_prompt=True))

  def read_segment(self, ids) -> tuple[str, bool]:
    """`(content, finished)` of a sampled turn: finished when it ends on a stop token, which is
    not part of the content."""
    ids = [int(i) for i in ids]
    if ids and ids[-1] in self.stop_tokens:
      return self.tokenizer.decode(ids[:-1]), True
    return self.tokenizer.decode(ids), False

  def observation_ids(self, episode: _core.Episode, observation: str) -> list[int]:
    """The ids after the episode's last turn (a call) up to the next generation prompt: the
    template's delta for the tool message (see the module docstring)."""
    del observation  # the tool message is built from the episode's own last result
    messages = self.messages(episode)
    before, tail = self._after_turn(messages[:-1], episode.task)
    after = self.render(messages, episode.task, generation_prompt=True)
    if not after.startswith(before):
      raise FormatError(f"{self.source}: the chat_template renders the conversation before a "
                        "tool message differently once the tool message is added; its "
                        "rendering cannot be extended turn by turn")
    return self._ids(tail + after[len(before):])

  def pieces(self, episode: _core.Episode) -> list[tuple[list[int], float]]:
    """`(ids, weight)` pieces of a finished episode: the prompt (0), each assistant turn as
    the template renders it through its turn-end token (1), the template's delta after it
    (0). A truncated segment is its text as written (1)."""
    task = episode.task
    messages = self.prompt_messages(task)
    text = self.render(messages, task, generation_prompt=True)
    pieces = [(self._ids(text), 0.0)]
    for action in episode.actions:
      if action.kind == "truncated":
        if action.text:
          pieces.append((self._ids(action.text), 1.0))
        break
      messages = messages + [self._syntax.message(action.text)]
      with_turn, tail = self._after_turn(messages, task)
      if not with_turn.startswith(text):
        raise FormatError(f"{self.source}: the chat_template renders the conversation "
                          "differently once an assistant turn is added")
      turn = with_turn[len(text):len(with_turn) - len(tail)]
      pieces.append((self._ids(turn), 1.0))
      if action.result is None:
        break
      messages = messages + [_tool_message(action.result)]
      text = self.render(messages, task, generation_prompt=True)
      pieces.append((self._ids(tail + text[len(with_turn):]), 0.0))
    return pieces

  def encode(self, episode: _core.Episode, max_length: int) -> tuple[np.ndarray, np.ndarray]:
    """`(tokens, loss_mask)` of a finished episode (a demonstration), `[max_length]` each."""
    return _encode.encode_id_pieces(self.pieces(episode), max_length,
                                    what=f"episode {episode.task.task_id}")

  def adopt(self, episodes: Sequence[_core.Episode], toolbox_for) -> list[_core.Episode]:
    """Episodes played in the marker syntax (the suites' experts), rewritten in this format's
    syntax: the same calls, results and answers (see `episodes.rewrite_segment`)."""
    adopted = []
    for episode in episodes:
      if episode.syntax == self.syntax:
        adopted.append(episode)
        continue
      toolbox = toolbox_for(episode.task)
      actions = [_core.Action(_syntax.rewrite_segment(a.text, a.result, self._syntax, toolbox),
                              a.kind, a.result)
                 for a in episode.actions]
      adopted.append(dataclasses.replace(episode, actions=actions, syntax=self.syntax))
    return adopted
