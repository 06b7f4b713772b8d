"""The key-door text world as a JAX environment on token ids: a long-horizon tool-use task.

The rules and texts are `tasks.keydoor`'s (the host world, the reference); here they are pure
functions of arrays, so whole episodes run inside `jit` (`rollout.make_jit_rollout`):

    env = envs.KeyDoorTextEnv.from_tasks(tasks, tokenizer, max_length=768, max_tool_calls=48)
    episode = env.reset(task_index)
    episode = env.step(episode, segment, key)       # after the policy wrote a segment
    terms = env.reward_terms(episode)

A segment ending in `</call>` whose call text is exactly one of `ACTIONS` changes the world; any
other call text is the observation `error: unknown action` (status MALFORMED, as the host's
`tasks.keydoor.parse_action` refuses it). The observation is the state after the call (see
`tasks.keydoor`). `</answer>` ends the episode, a success when the agent stands on the goal.

The world's transition is one method, `transition`; a learned simulator (`world_models.
TextWorldModelEnv`) replaces it with a model's prediction and keeps everything else.
"""

import dataclasses
from typing import Any, Sequence

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from rlagents import episodes as episodes_lib
from rlagents import tools as tools_lib
from rlagents.envs import _text_env

_OK = tools_lib.CALL_STATUSES.index(tools_lib.CallStatus.OK)
_MALFORMED = tools_lib.CALL_STATUSES.index(tools_lib.CallStatus.MALFORMED)

# What a call did, as the reward sees it (the simulator predicts one of these per call).
EFFECT_NONE, EFFECT_KEY, EFFECT_DOOR, EFFECT_INVALID, EFFECT_WASTED = range(5)
NUM_EFFECTS = 5
OBSERVATION_WIDTH = 32


@flax.struct.dataclass
class KeyDoorEpisode:
  """One episode's state (a leading batch axis under `vmap`).

  Attributes:
    tokens, length, loss_mask, logprobs, task, active, answered, num_calls, call_status: as
      `envs.TextEpisode`.
    correct: the episode answered on the goal.
    world: `[4]` int32, x, y, holds the key, door open (the real world's state).
    at_goal: the last observation says the agent is on the goal.
    observation: `[32]` int32, the last observation of a valid call (the start cell's state text
      at first): with the prompt, all a simulator needs to predict the next one.
    observation_length: int32 scalar.
    picked, opened: the key was picked up, the door opened (at any time).
    invalid_calls, wasted_calls: int32 counts.
    uncertainty: float32, the largest `KeyDoorTransition.uncertainty` of its calls (0 in the real
      world; a learned simulator's predictive entropy).
  """
  tokens: jax.Array
  length: jax.Array
  loss_mask: jax.Array
  logprobs: jax.Array
  task: jax.Array
  active: jax.Array
  answered: jax.Array
  correct: jax.Array
  num_calls: jax.Array
  call_status: jax.Array
  world: jax.Array
  at_goal: jax.Array
  observation: jax.Array
  observation_length: jax.Array
  picked: jax.Array
  opened: jax.Array
  invalid_calls: jax.Array
  wasted_calls: jax.Array
  uncertainty: jax.Array


@flax.struct.dataclass
class KeyDoorTransition:
  """What one call led to.

  Attributes:
    observation: `[32]` int32 text; `observation_length` its length.
    effect: one of the `EFFECT_*` codes.
    at_goal: bool, the agent stands on the goal afterwards.
    world: `[4]` int32, the world state afterwards (the simulator carries the old one).
    uncertainty: float32, how unsure the transition is (0 for the real world).
  """
  observation: jax.Array
  observation_length: jax.Array
  effect: jax.Array
  at_goal: jax.Array
  world: jax.Array
  uncertainty: jax.Array = 0.0


def parse_keydoor_action(text: str) -> tools_lib.ToolCall:
  """A call's text as a `ToolCall` when it is exactly one of `KeyDoorTextEnv.ACTIONS` (no
  spaces around); the host tools' parser, matching `KeyDoorTextEnv.action_index`.

  Raises:
    tools.MalformedToolCall: anything else ('unknown action').

  Args:
    text: the text between `<call>` and `</call>`.
  """
  if text not in KeyDoorTextEnv.ACTIONS:
    raise tools_lib.MalformedToolCall(KeyDoorTextEnv.UNKNOWN_ACTION)
  name, _, rest = text.partition("(")
  return tools_lib.ToolCall(name=name, arguments=rest[:-1])


def _ids(tokenizer, text: str) -> np.ndarray:
  return np.asarray(tokenizer.encode(text, add_special_tokens=False), np.int32)


def _table(tokenizer, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
  ids = [_ids(tokenizer, t) for t in texts]
  width = max(1, max(len(i) for i in ids))
  table = np.zeros((len(ids), width), np.int32)
  for row, i in enumerate(ids):
    table[row, :len(i)] = i
  return table, np.array([len(i) for i in ids], np.int32)


@dataclasses.dataclass(frozen=True, eq=False)
class KeyDoorTextEnv:
  """Key-door worlds, their rules and rewards on token ids; see the module docstring.

  Build with `from_tasks` (host code); the methods are pure JAX (`TextEnvironment`).

  Attributes:
    prompts: `[N, L]` int32 `<bos>{prompt}`; `prompt_lengths` `[N]`.
    layouts: `[N, 10]` int32: width, height, door x, y, key x, y, goal x, y, start x, y.
    texts: token tables by name (actions, events, digits, words), `(table, lengths)` each.
    special: the markers' token ids.
    max_length, max_tool_calls, max_segment_tokens: the limits (`TextEnvironment`).
    reward_weights: key, door, invalid, wasted weights (`tasks.keydoor.compose_reward`).
  """
  ACTIONS = ("move(north)", "move(south)", "move(east)", "move(west)", "pick()", "open()")
  EVENTS = ("", "blocked ", "nothing ", "cannot ")
  UNKNOWN_ACTION = "unknown action"
  WORDS = (" key", " open", " goal", ",")

  prompts: np.ndarray
  prompt_lengths: np.ndarray
  layouts: np.ndarray
  texts: dict[str, tuple[np.ndarray, np.ndarray]]
  special: dict[str, int]
  max_length: int
  max_tool_calls: int
  max_segment_tokens: int
  reward_weights: tuple[float, float, float, float] = (0.1, 0.1, 0.02, 0.01)

  @classmethod
  def from_tasks(cls, tasks: Sequence[Any], tokenizer: Any, *, max_length: int = 768,
                 max_tool_calls: int = 48, max_segment_tokens: int = 16,
                 reward_weights: tuple[float, float, float, float] = (0.1, 0.1, 0.02, 0.01),
                 ) -> "KeyDoorTextEnv":
    """Tokenizes the worlds (`tasks.keydoor.KeyDoorTask`s); host code.

    Raises:
      ValueError: no tasks, a limit below 1, a prompt that does not fit, or a world side
        above 10 (coordinates are one digit).
    """
    for name, value in (("max_length", max_length), ("max_tool_calls", max_tool_calls),
                        ("max_segment_tokens", max_segment_tokens)):
      if value < 1:
        raise ValueError(f"KeyDoorTextEnv: {name} must be >= 1, got {value}")
    if not tasks:
      raise ValueError("KeyDoorTextEnv needs at least one task")
    n = len(tasks)
    prompts = np.zeros((n, max_length), np.int32)
    prompt_lengths = np.zeros(n, np.int32)
    layouts = np.zeros((n, 10), np.int32)
    for i, t in enumerate(tasks):
      if max(t.width, t.height) > 10:
        raise ValueError(f"task {i}: a {t.width}x{t.height} world has two-digit coordinates")
      ids = _ids(tokenizer, episodes_lib.BOS + t.prompt)
      if len(ids) >= max_length:
        raise ValueError(f"task {i}'s prompt needs {len(ids)} tokens; max_length={max_length}")
      prompts[i, :len(ids)] = ids
      prompt_lengths[i] = len(ids)
      layouts[i] = (t.width, t.height, t.door_x, t.door_y, t.key_x, t.key_y, t.goal_x,
                    t.goal_y, t.start_x, t.start_y)
    texts = {"actions": _table(tokenizer, cls.ACTIONS),
             "events": _table(tokenizer, cls.EVENTS),
             "digits": _table(tokenizer, [str(d) for d in range(10)]),
             "words": _table(tokenizer, cls.WORDS),
             "error": _table(tokenizer, ["error: " + cls.UNKNOWN_ACTION])}
    special = {name: tokenizer.convert_tokens_to_ids(name) for name in episodes_lib.MARKERS}
    return cls(prompts=prompts, prompt_lengths=prompt_lengths, layouts=layouts, texts=texts,
               special=special, max_length=max_length, max_tool_calls=max_tool_calls,
               max_segment_tokens=max_segment_tokens, reward_weights=tuple(reward_weights))

  @property
  def num_tasks(self) -> int:
    return len(self.prompts)

  @property
  def stop_tokens(self) -> tuple[int, ...]:
    return tuple(self.special[name] for name in episodes_lib.STOP_MARKERS)

  def _text(self, name):
    table, lengths = self.texts[name]
    return jnp.asarray(table), jnp.asarray(lengths)

  def state_text(self, task, world) -> tuple[jax.Array, jax.Array]:
    """`x,y[ key][ open][ goal]` of a world state, `[32]` tokens and the length."""
    digits, _ = self._text("digits")
    words, word_lengths = self._text("words")
    layout = jnp.asarray(self.layouts)[task]
    goal = (world[0] == layout[6]) & (world[1] == layout[7])
    one = jnp.int32(1)
    pieces = [(digits[world[0], :1], one), (words[3], word_lengths[3]),
              (digits[world[1], :1], one),
              (words[0], jnp.where(world[2] > 0, word_lengths[0], 0)),
              (words[1], jnp.where(world[3] > 0, word_lengths[1], 0)),
              (words[2], jnp.where(goal, word_lengths[2], 0))]
    return _text_env.join_text_pieces(pieces, OBSERVATION_WIDTH)

  def reset(self, task: jax.Array) -> KeyDoorEpisode:
    """A new episode of task `task` (int32 scalar)."""
    task = jnp.asarray(task, jnp.int32)
    layout = jnp.asarray(self.layouts)[task]
    world = jnp.array([layout[8], layout[9], 0, 0], jnp.int32)
    observation, observation_length = self.state_text(task, world)
    return KeyDoorEpisode(
        tokens=jnp.asarray(self.prompts)[task], length=jnp.asarray(self.prompt_lengths)[task],
        loss_mask=jnp.zeros(self.max_length, jnp.float32),
        logprobs=jnp.zeros(self.max_length, jnp.float32), task=task, active=jnp.bool_(True),
        answered=jnp.bool_(False), correct=jnp.bool_(False), num_calls=jnp.int32(0),
        call_status=jnp.full(self.max_tool_calls, -1, jnp.int32), world=world,
        at_goal=jnp.bool_(False), observation=observation,
        observation_length=observation_length, picked=jnp.bool_(False),
        opened=jnp.bool_(False), invalid_calls=jnp.int32(0), wasted_calls=jnp.int32(0),
        uncertainty=jnp.float32(0.0))

  def action_index(self, call: jax.Array, call_length: jax.Array) -> jax.Array:
    """The index in `ACTIONS` of a call text `[W]` (exact match), or -1."""
    table, lengths = self._text("actions")
    width = min(table.shape[1], call.shape[0])
    same = (lengths == call_length) & jnp.all(
        (table[:, :width] == call[None, :width]) | (jnp.arange(width) >= lengths[:, None]),
        axis=1)
    same = same & (lengths <= call.shape[0])
    return jnp.where(jnp.any(same), jnp.argmax(same), -1)

  def transition(self, episode: KeyDoorEpisode, action: jax.Array, key: jax.Array
                 ) -> KeyDoorTransition:
    """The real world's rules for one call (`tasks.keydoor.apply_action`); `action` -1 is no
    action (the error observation)."""
    del key
    layout = jnp.asarray(self.layouts)[episode.task]
    x, y, has_key, door_open = episode.world
    moves = jnp.array([[0, -1], [0, 1], [1, 0], [-1, 0]], jnp.int32)
    move = moves[jnp.clip(action, 0, 3)]
    nx, ny = x + move[0], y + move[1]
    inside = (nx >= 0) & (nx < layout[0]) & (ny >= 0) & (ny < layout[1])
    wall = (nx == layout[2]) & ((ny != layout[3]) | (door_open == 0))
    can_move = inside & ~wall
    on_key = (x == layout[4]) & (y == layout[5]) & (has_key == 0)
    beside = jnp.abs(x - layout[2]) + jnp.abs(y - layout[3]) == 1
    can_open = (has_key > 0) & beside & (door_open == 0)
    is_move, is_pick, is_open = action < 4, action == 4, action == 5
    event = jnp.where(is_move, jnp.where(can_move, 0, 1),
                      jnp.where(is_pick, jnp.where(on_key, 0, 2), jnp.where(can_open, 0, 3)))
    changed = (action >= 0) & (event == 0)
    world = jnp.array([
        jnp.where(changed & is_move, nx, x), jnp.where(changed & is_move, ny, y),
        jnp.where(changed & is_pick, 1, has_key), jnp.where(changed & is_open, 1, door_open)],
        jnp.int32)
    events, event_lengths = self._text("events")
    state, state_length = self.state_text(episode.task, world)
    error, error_length = self._text("error")
    valid = action >= 0
    observation, length = _text_env.join_text_pieces(
        [(events[event], jnp.where(valid, event_lengths[event], 0)),
         (state, jnp.where(valid, state_length, 0)),
         (error[0], jnp.where(valid, 0, error_length[0]))], OBSERVATION_WIDTH)
    effect = jnp.where(~valid, EFFECT_INVALID, jnp.where(
        event > 0, EFFECT_WASTED, jnp.where(changed & is_pick, EFFECT_KEY,
                                            jnp.where(changed & is_open, EFFECT_DOOR,
                                                      EFFECT_NONE))))
    at_goal = (world[0] == layout[6]) & (world[1] == layout[7])
    return KeyDoorTransition(observation, length, effect.astype(jnp.int32), at_goal, world,
                      jnp.float32(0.0))

  def step(self, episode: KeyDoorEpisode, segment: Any, key: jax.Array) -> KeyDoorEpisode:
    """Reads the segment, applies the call (or ends the episode), as `episodes.advance` does.

    `</answer>` ends the episode (correct on the goal); `</call>` with fewer than
    `max_tool_calls` calls so far runs `transition` and appends `<obs>{observation}</obs>`,
    unless that would fill the buffer, which ends the episode unanswered; anything else ends it
    unanswered. An inactive episode is returned unchanged.
    """
    active = episode.active
    start, end = episode.length, segment.length
    generated = segment.generated_mask & active
    loss_mask = jnp.where(generated, 1.0, episode.loss_mask)
    logprobs = jnp.where(generated, segment.logprobs, episode.logprobs)
    tokens = jnp.where(active, segment.tokens, episode.tokens)
    answers = active & (segment.stop_token == self.special["</answer>"])
    calls = (active & (segment.stop_token == self.special["</call>"])
             & (episode.num_calls < self.max_tool_calls))
    call, call_length = _text_env.text_after_last(tokens, self.special["<call>"], start, end - 1,
                                             self.max_segment_tokens, self.max_length)
    action = self.action_index(call, call_length)
    result = self.transition(episode, action, key)
    body_length = jnp.minimum(result.observation_length, OBSERVATION_WIDTH)
    observation = jnp.concatenate([jnp.array([self.special["<obs>"]], jnp.int32),
                                   result.observation, jnp.zeros(1, jnp.int32)])
    observation = observation.at[body_length + 1].set(self.special["</obs>"])
    obs_length = body_length + 2
    fits = end + obs_length < self.max_length
    slots = jnp.arange(observation.shape[0])
    write_at = jnp.where(calls & fits & (slots < obs_length), end + slots, self.max_length)
    tokens = tokens.at[write_at].set(observation, mode="drop")
    applied = calls & fits  # a call whose observation does not fit still acted (as on the host)
    slot = jnp.where(calls, episode.num_calls, self.max_tool_calls)
    status = jnp.where(action >= 0, _OK, _MALFORMED)
    acted = calls & (action >= 0)  # an error observation does not replace the last state
    return episode.replace(
        tokens=tokens,
        length=jnp.where(active, end + jnp.where(applied, obs_length, 0), episode.length),
        loss_mask=loss_mask, logprobs=logprobs, active=applied,
        answered=episode.answered | answers,
        correct=episode.correct | (answers & episode.at_goal),
        num_calls=episode.num_calls + calls.astype(jnp.int32),
        call_status=episode.call_status.at[slot].set(status, mode="drop"),
        world=jnp.where(calls, result.world, episode.world),
        at_goal=jnp.where(calls, result.at_goal, episode.at_goal),
        observation=jnp.where(acted, result.observation, episode.observation),
        observation_length=jnp.where(acted, body_length, episode.observation_length),
        picked=episode.picked | (calls & (result.effect == EFFECT_KEY)),
        opened=episode.opened | (calls & (result.effect == EFFECT_DOOR)),
        invalid_calls=episode.invalid_calls + (calls & (result.effect == EFFECT_INVALID)),
        wasted_calls=episode.wasted_calls + (calls & (result.effect == EFFECT_WASTED)),
        uncertainty=jnp.maximum(episode.uncertainty, jnp.where(calls, result.uncertainty, 0.0)),
    )

  def reward_terms(self, episode: KeyDoorEpisode) -> dict[str, jax.Array]:
    """`tasks.keydoor.REWARD_TERMS` of a finished episode (float32 scalars)."""
    return {"correct_answer": episode.correct.astype(jnp.float32),
            "picked_key": episode.picked.astype(jnp.float32),
            "opened_door": episode.opened.astype(jnp.float32),
            "invalid_calls": episode.invalid_calls.astype(jnp.float32),
            "redundant_calls": episode.wasted_calls.astype(jnp.float32)}

  def compose_reward(self, terms: dict[str, jax.Array]) -> jax.Array:
    """`tasks.keydoor.compose_reward` with this environment's weights."""
    key, door, invalid, wasted = self.reward_weights
    return (terms["correct_answer"] + key * terms["picked_key"] + door * terms["opened_door"]
            - invalid * terms["invalid_calls"] - wasted * terms["redundant_calls"])
