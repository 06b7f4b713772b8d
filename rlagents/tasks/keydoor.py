"""The key-door text world: a long-horizon tool-use suite with a scripted noisy expert (host code).

A world is a `width x height` grid split by a wall column with one locked door. The agent starts
on the left of the wall, where a key lies; the goal is on the right. The prompt states the layout,
for example `7x6 door 3,2 key 1,4 goal 5,0 at 0,1` (x grows east, y grows south; every other cell
of the door's column is wall). The agent acts with tool calls:

    <call>move(north)</call><obs>0,0</obs>          moves one cell (north, south, east, west)
    <call>pick()</call><obs>1,4 key</obs>           picks up the key on its cell
    <call>open()</call><obs>2,2 key open</obs>      opens the door next to it, with the key
    <answer>done</answer>                           ends the episode

Each observation is the state after the call, `x,y` then ` key` (holding it), ` open` (the door
is open) and ` goal` (standing on the goal); a call that changes nothing says why first
(`blocked 2,2`, `nothing 0,1`, `cannot 2,2 key`) and any other call text is
`error: unknown action`. The observation is therefore Markov given the prompt: a learned
simulator needs only the prompt, the last observation and the call. The episode succeeds when the
agent answers while standing on the goal (the environment's own state decides, not the answer's
text). The shortest solution of every generated world takes `min_calls` to `max_calls` calls.

Splits: `train`, `heldout` and `calibration` hold worlds of the training size, assigned by the
sha256 of their layout text, so they are disjoint by construction; `heldout_ood` holds larger
worlds (`ood_width x ood_height`), which no other split has.

`envs.KeyDoorTextEnv` is the same world as a JAX environment on token ids (the same
observations, byte for byte); `toolbox_for` here is the host one, guarded like every suite's.
"""

import dataclasses
import hashlib
import re
from typing import Any, Sequence

import numpy as np

from rlagents import envs
from rlagents import episodes as episodes_lib
from rlagents import guardrails
from rlagents import tools as tools_lib
from rlagents.tasks import _proposals
from rlagents.tasks import _registry

SPLITS = ("train", "heldout", "heldout_ood", "calibration")
DIRECTIONS = {"north": (0, -1), "south": (0, 1), "east": (1, 0), "west": (-1, 0)}
# Every valid call text, in the order `envs.KeyDoorTextEnv` numbers the actions.
ACTIONS = envs.KeyDoorTextEnv.ACTIONS
UNKNOWN_ACTION = envs.KeyDoorTextEnv.UNKNOWN_ACTION
EVENTS = envs.KeyDoorTextEnv.EVENTS
ANSWER = "done"
REWARD_TERMS = ("correct_answer", "picked_key", "opened_door", "invalid_calls", "redundant_calls")

_HELDOUT_FRACTION = 0.1
_CALIBRATION_FRACTION = 0.1
_MAX_SIDE = 10  # coordinates are one digit
PROPOSER_PROMPT = "propose:"
PROPOSED_SPLIT = "proposed"
_LAYOUT = re.compile(r"(\d+)x(\d+) door (\d),(\d) key (\d),(\d) goal (\d),(\d) at (\d),(\d)")


@dataclasses.dataclass(frozen=True)
class KeyDoorTask:
  """One world.

  Attributes:
    task_id: `{split}-{16 hex digits of sha256(layout text)}`.
    width, height: the grid.
    door_x, door_y: the door; the rest of column `door_x` is wall.
    key_x, key_y: the key (left of the wall).
    goal_x, goal_y: the goal (right of the wall).
    start_x, start_y: the agent's first cell (left of the wall).
    split: one of `SPLITS`.
    shortest_calls: the calls of the shortest solution.
  """
  task_id: str
  width: int
  height: int
  door_x: int
  door_y: int
  key_x: int
  key_y: int
  goal_x: int
  goal_y: int
  start_x: int
  start_y: int
  split: str
  shortest_calls: int

  @property
  def prompt(self) -> str:
    return layout_text(self)


def layout_text(t) -> str:
  return (f"{t.width}x{t.height} door {t.door_x},{t.door_y} key {t.key_x},{t.key_y} "
          f"goal {t.goal_x},{t.goal_y} at {t.start_x},{t.start_y}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class KeyDoorSuiteConfig:
  """What worlds the suite holds, how the noisy expert errs and how episodes are rewarded.

  Attributes:
    seed: seeds the world generator.
    num_train, num_heldout, num_heldout_ood, num_calibration: worlds per split.
    width, height: the training worlds' size (train, heldout, calibration).
    ood_width, ood_height: heldout_ood's size (larger in at least one side).
    min_calls, max_calls: the range of shortest-solution lengths (tool calls) kept.
    slip_rate: the expert moves in a random direction instead of the planned one.
    malformed_rate: the expert writes a call that is no action (`move(up)`).
    forget_key_rate: the expert walks to the door without picking up the key first (it comes
      back when `open()` fails).
    key_reward, door_reward: shaping for picking up the key and opening the door (once each).
    invalid_penalty: per call that is no action.
    wasted_penalty: per call that changed nothing (blocked, nothing, cannot): the reward term
      `redundant_calls`, as the report's figure of that name counts calls that added nothing.
  """
  seed: int = 0
  num_train: int = 4000
  num_heldout: int = 200
  num_heldout_ood: int = 200
  num_calibration: int = 200
  width: int = 7
  height: int = 6
  ood_width: int = 10
  ood_height: int = 8
  min_calls: int = 10
  max_calls: int = 40
  slip_rate: float = 0.08
  malformed_rate: float = 0.03
  forget_key_rate: float = 0.05
  key_reward: float = 0.1
  door_reward: float = 0.1
  invalid_penalty: float = 0.02
  wasted_penalty: float = 0.01

  def __post_init__(self):
    def fail(field, requirement):
      raise ValueError(f"KeyDoorSuiteConfig.{field}={getattr(self, field)!r}: {requirement}")

    for field in ("num_train", "num_heldout", "num_heldout_ood", "num_calibration"):
      if getattr(self, field) < 1:
        fail(field, "must be >= 1")
    for field in ("width", "height", "ood_width", "ood_height"):
      if not 3 <= getattr(self, field) <= _MAX_SIDE:
        fail(field, f"must be in [3, {_MAX_SIDE}] (one-digit coordinates)")
    if self.width < 5 or self.ood_width < 5:
      fail("width", "width and ood_width must be >= 5 (two columns each side of the wall)")
    if self.ood_width * self.ood_height <= self.width * self.height:
      fail("ood_width", "the OOD worlds must be larger than the training worlds")
    if not 1 <= self.min_calls <= self.max_calls:
      fail("min_calls", f"must be in [1, max_calls={self.max_calls}]")
    for field in ("slip_rate", "malformed_rate", "forget_key_rate"):
      if not 0.0 <= getattr(self, field) <= 1.0:
        fail(field, "must be in [0, 1]")


def shortest_calls(t) -> int:
  """Calls of the shortest solution: to the key, pick, next to the door, open, to the goal."""
  west_of_door = (t.door_x - 1, t.door_y)
  return (abs(t.key_x - t.start_x) + abs(t.key_y - t.start_y) + 1
          + abs(west_of_door[0] - t.key_x) + abs(west_of_door[1] - t.key_y) + 1
          + abs(t.goal_x - west_of_door[0]) + abs(t.goal_y - west_of_door[1]))


def _draw(rng: np.random.Generator, width: int, height: int) -> dict[str, int]:
  door_x = int(rng.integers(2, width - 2))
  left = [(x, y) for x in range(door_x) for y in range(height)]
  start, key = rng.choice(len(left), 2, replace=False)
  goal_x = int(rng.integers(door_x + 1, width))
  return dict(width=width, height=height, door_x=door_x, door_y=int(rng.integers(height)),
              key_x=left[key][0], key_y=left[key][1], goal_x=goal_x,
              goal_y=int(rng.integers(height)), start_x=left[start][0],
              start_y=left[start][1])


def _split_of(layout: str) -> str:
  position = int.from_bytes(hashlib.sha256(layout.encode()).digest()[:8], "big") / 2**64
  if position < _HELDOUT_FRACTION:
    return "heldout"
  if position < _HELDOUT_FRACTION + _CALIBRATION_FRACTION:
    return "calibration"
  return "train"


def generate_suite(config: KeyDoorSuiteConfig) -> dict[str, list[KeyDoorTask]]:
  """Every split's worlds, deterministic given `config`; see the module docstring.

  Raises:
    RuntimeError: the sizes and call range admit too few distinct worlds for the splits.
  """
  in_rng, ood_rng = (np.random.default_rng(s)
                     for s in np.random.SeedSequence(config.seed).spawn(2))
  sizes = {"train": config.num_train, "heldout": config.num_heldout,
           "calibration": config.num_calibration, "heldout_ood": config.num_heldout_ood}
  tasks = {split: [] for split in SPLITS}
  seen = set()
  for rng, (width, height), ood in ((in_rng, (config.width, config.height), False),
                                    (ood_rng, (config.ood_width, config.ood_height), True)):
    wanted = ["heldout_ood"] if ood else ["train", "heldout", "calibration"]
    draws, limit = 0, 200 * sum(sizes[s] for s in wanted)
    while any(len(tasks[s]) < sizes[s] for s in wanted):
      if draws >= limit:
        short = [s for s in wanted if len(tasks[s]) < sizes[s]]
        raise RuntimeError(f"key-door suite: too few distinct {width}x{height} worlds with "
                           f"{config.min_calls}-{config.max_calls} calls for splits {short}; "
                           "ask for fewer worlds or widen the call range")
      draws += 1
      fields = _draw(rng, width, height)
      layout = layout_text(_Fields(fields))
      calls = shortest_calls(_Fields(fields))
      split = "heldout_ood" if ood else _split_of(layout)
      if (layout in seen or not config.min_calls <= calls <= config.max_calls
          or len(tasks[split]) >= sizes[split]):
        continue
      seen.add(layout)
      digest = hashlib.sha256(layout.encode()).hexdigest()[:16]
      tasks[split].append(KeyDoorTask(task_id=f"{split}-{digest}", split=split,
                                      shortest_calls=calls, **fields))
  return tasks


class _Fields:
  def __init__(self, fields):
    self.__dict__.update(fields)


# ---- the world's rules (the reference `envs.KeyDoorTextEnv` follows) ----


@dataclasses.dataclass
class WorldState:
  """The dynamic part of a world: where the agent is, whether it holds the key, the door."""
  x: int
  y: int
  has_key: bool = False
  door_open: bool = False

  @classmethod
  def start(cls, task) -> "WorldState":
    return cls(task.start_x, task.start_y)


def state_text(task, state: WorldState) -> str:
  """`x,y[ key][ open][ goal]`."""
  text = f"{state.x},{state.y}"
  if state.has_key:
    text += " key"
  if state.door_open:
    text += " open"
  if (state.x, state.y) == (task.goal_x, task.goal_y):
    text += " goal"
  return text


def apply_action(task, state: WorldState, action: str) -> tuple[WorldState, str]:
  """The state after `action` (one of `ACTIONS`), and the event word ('' if it changed)."""
  state = dataclasses.replace(state)
  if action.startswith("move("):
    dx, dy = DIRECTIONS[action[5:-1]]
    x, y = state.x + dx, state.y + dy
    inside = 0 <= x < task.width and 0 <= y < task.height
    wall = x == task.door_x and (y != task.door_y or not state.door_open)
    if not inside or wall:
      return state, "blocked "
    state.x, state.y = x, y
    return state, ""
  if action == "pick()":
    if (state.x, state.y) == (task.key_x, task.key_y) and not state.has_key:
      state.has_key = True
      return state, ""
    return state, "nothing "
  # open()
  beside = abs(state.x - task.door_x) + abs(state.y - task.door_y) == 1
  if state.has_key and beside and not state.door_open:
    state.door_open = True
    return state, ""
  return state, "cannot "


def at_goal(task, state: WorldState) -> bool:
  return (state.x, state.y) == (task.goal_x, task.goal_y)


class World:
  """One episode's world on the host: three tools (`move`, `pick`, `open`) over one state."""

  def __init__(self, task):
    self.task, self.state = task, WorldState.start(task)
    self.picked = self.opened = False

  def act(self, action: str) -> str:
    self.state, event = apply_action(self.task, self.state, action)
    self.picked |= self.state.has_key
    self.opened |= self.state.door_open
    return event + state_text(self.task, self.state)


class _ActionTool:
  def __init__(self, world: World, name: str):
    self.world = world
    self.spec = tools_lib.ToolSpec(name=name, description=f"key-door world: {name}",
                                   parameters={"type": "string"})

  def __call__(self, arguments: str, rng: np.random.Generator) -> str:
    del rng
    return self.world.act(f"{self.spec.name}({arguments})")


parse_action = envs.parse_keydoor_action


def world_tools(world: World) -> list:
  return [_ActionTool(world, name) for name in ("move", "pick", "open")]


def world_of(episode: episodes_lib.Episode) -> WorldState:
  """The world state an episode's calls led to (replayed from its task; host code)."""
  world = World(episode.task)
  for result in episode.calls:
    if result.status == tools_lib.CallStatus.OK:
      world.act(f"{result.call.name}({result.call.arguments})")
  return world.state


def reward_terms(episode: episodes_lib.Episode) -> dict[str, float]:
  """`REWARD_TERMS` of a finished episode, from the world state its calls led to."""
  world = World(episode.task)
  invalid = wasted = 0
  for result in episode.calls:
    if result.status != tools_lib.CallStatus.OK:
      invalid += 1
      continue
    text = world.act(f"{result.call.name}({result.call.arguments})")
    wasted += any(text.startswith(event) for event in EVENTS[1:])
  correct = episode.answer is not None and at_goal(episode.task, world.state)
  return {"correct_answer": float(correct), "picked_key": float(world.picked),
          "opened_door": float(world.opened), "invalid_calls": float(invalid),
          "redundant_calls": float(wasted)}


def compose_reward(terms, config: KeyDoorSuiteConfig):
  """The scalar reward of `reward_terms` (floats or JAX arrays alike)."""
  return (terms["correct_answer"] + config.key_reward * terms["picked_key"]
          + config.door_reward * terms["opened_door"]
          - config.invalid_penalty * terms["invalid_calls"]
          - config.wasted_penalty * terms["redundant_calls"])


# ---- the scripted noisy expert ----


def _parse_state(task, observation: str | None) -> WorldState:
  if observation is None:
    return WorldState.start(task)
  words = observation.split(" ")
  if words[0] + " " in EVENTS[1:]:
    words = words[1:]
  x, y = (int(v) for v in words[0].split(","))
  return WorldState(x, y, has_key="key" in words, door_open="open" in words)


def plan(task, state: WorldState, *, skip_key: bool = False) -> str:
  """The next action of a shortest solution from `state` (`ANSWER` at the goal)."""
  if at_goal(task, state):
    return ANSWER

  def toward(x, y):
    if state.x != x:
      return "move(east)" if x > state.x else "move(west)"
    return "move(south)" if y > state.y else "move(north)"

  if state.door_open:
    if state.x >= task.door_x:
      return toward(task.goal_x, task.goal_y)
    if (state.x, state.y) == (task.door_x - 1, task.door_y):
      return "move(east)"
    return toward(task.door_x - 1, task.door_y)
  if not state.has_key and not skip_key:
    if (state.x, state.y) == (task.key_x, task.key_y):
      return "pick()"
    return toward(task.key_x, task.key_y)
  if (state.x, state.y) == (task.door_x - 1, task.door_y):
    return "open()"
  return toward(task.door_x - 1, task.door_y)


def expert_segment(task, last_observation: str | None, rng: np.random.Generator,
                   config: KeyDoorSuiteConfig, *, forgets: bool) -> str:
  """The noisy expert's next segment, from the prompt and the last observation only."""
  state = _parse_state(task, last_observation)
  action = plan(task, state, skip_key=forgets)
  if action == ANSWER:
    return f"{episodes_lib.ANSWER_OPEN}{ANSWER}{episodes_lib.ANSWER_CLOSE}"
  draw = rng.random()
  if draw < config.malformed_rate:
    action = str(rng.choice(["move(up)", "move(down)", "pick(key)", "go(east)"]))
  elif draw < config.malformed_rate + config.slip_rate:
    action = str(rng.choice(ACTIONS[:4]))
  return f"{episodes_lib.CALL_OPEN}{action}{episodes_lib.CALL_CLOSE}"


def run_expert_episodes(tasks: Sequence[Any], *, toolbox_for, rng: np.random.Generator,
                        max_tool_calls: int,
                        config: KeyDoorSuiteConfig) -> list[episodes_lib.Episode]:
  """One expert episode per task through the guarded host tools."""
  played = []
  for task in tasks:
    episode = episodes_lib.Episode(task)
    toolbox = toolbox_for(task)
    forgets = bool(rng.random() < config.forget_key_rate)
    last = None
    while not episode.done:
      observation = episodes_lib.advance(
          episode, expert_segment(task, last, rng, config, forgets=forgets), toolbox=toolbox,
          rng=rng, max_tool_calls=max_tool_calls)
      if observation is not None:
        result = episode.calls[-1]
        if result.status == tools_lib.CallStatus.OK:
          last = result.observation
        if last is not None and last.startswith("cannot"):
          forgets = False
    played.append(episode)
  return played


def jax_env(tasks: Sequence[Any], tokenizer, rollout_config,
            config: KeyDoorSuiteConfig) -> envs.KeyDoorTextEnv:
  """The worlds as `envs.KeyDoorTextEnv` with the rollout's limits and the suite's weights."""
  return envs.KeyDoorTextEnv.from_tasks(
      tasks, tokenizer, max_length=rollout_config.max_length,
      max_tool_calls=rollout_config.max_tool_calls,
      max_segment_tokens=rollout_config.max_segment_tokens,
      reward_weights=(config.key_reward, config.door_reward, config.invalid_penalty,
                      config.wasted_penalty))


def toolbox_for(task) -> tools_lib.ToolBox:
  """A fresh world for one episode of `task`, as guarded tools (`move`, `pick`, `open`); a
  self-play proposer's episode (`tasks.ProposerTask`) has no world and no tool."""
  if isinstance(task, _proposals.ProposerTask):
    return guardrails.guarded_toolbox([], parser=parse_action)
  return guardrails.guarded_toolbox(world_tools(World(task)), parser=parse_action)


def proposal_grammar(config: KeyDoorSuiteConfig) -> _proposals.ProposalGrammar:
  """How the policy proposes worlds (self-play): a layout in the prompt's own format.

  A proposal is a layout text, `7x6 door 3,2 key 1,4 goal 5,0 at 0,1`, of any size from 5x3 up
  to the larger of the training and OOD sizes (at most 10 a side), its text canonical (no
  leading zeros, single spaces). It is invalid unless it is a world the generator could draw:
  the door's column 2 to width-3 (two columns on each side of the wall), the key and the start
  on distinct cells left of the wall, the goal right of it. Such a world is always
  solvable (both sides are open rectangles); it is unsolvable when its shortest solution takes
  more than `max_calls` calls, the suite's own limit. Worlds of the training size are reserved
  for `heldout` or `calibration` by the hash rule that assigns the splits; `heldout_ood`
  worlds are caught by the checker by their text.
  """
  most_width = max(config.width, config.ood_width)
  most_height = max(config.height, config.ood_height)

  def to_task(text: str) -> KeyDoorTask:
    match = _LAYOUT.fullmatch(text)
    if not match or any(len(g) > 1 and g.startswith("0") for g in match.groups()):
      raise _proposals.InvalidProposal(
          f"{text!r} is not a layout `WxH door x,y key x,y goal x,y at x,y`")
    (width, height, door_x, door_y, key_x, key_y, goal_x, goal_y, start_x,
     start_y) = map(int, match.groups())
    problems = []
    if not (5 <= width <= most_width and 3 <= height <= most_height):
      problems.append(f"size {width}x{height} outside 5x3 .. {most_width}x{most_height}")
    elif not 2 <= door_x <= width - 3:
      problems.append(f"door column {door_x} outside 2 .. {width - 3}")
    elif not all(0 <= y < height for y in (door_y, key_y, goal_y, start_y)):
      problems.append(f"a row outside 0 .. {height - 1}")
    elif not (key_x < door_x and start_x < door_x and door_x < goal_x < width):
      problems.append("the key and the start must lie left of the door's column, the goal "
                      "right of it")
    elif (key_x, key_y) == (start_x, start_y):
      problems.append("the key lies on the start")
    if problems:
      raise _proposals.InvalidProposal(f"{text!r}: {problems[0]}")
    fields = dict(width=width, height=height, door_x=door_x, door_y=door_y, key_x=key_x,
                  key_y=key_y, goal_x=goal_x, goal_y=goal_y, start_x=start_x, start_y=start_y)
    calls = shortest_calls(_Fields(fields))
    if calls > config.max_calls:
      raise _proposals.UnsolvableProposal(
          f"{text!r}: the shortest solution takes {calls} calls, over max_calls="
          f"{config.max_calls}")
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return KeyDoorTask(task_id=f"{PROPOSED_SPLIT}-{digest}", split=PROPOSED_SPLIT,
                       shortest_calls=calls, **fields)

  def reserved_split(layout: str) -> str | None:
    match = _LAYOUT.fullmatch(layout)
    if not match or (int(match[1]), int(match[2])) != (config.width, config.height):
      return None
    split = _split_of(layout)
    return None if split == "train" else split

  def difficulty(task: KeyDoorTask) -> dict[str, float]:
    return {"area": float(task.width * task.height), "calls": float(task.shortest_calls)}

  def demonstrations(train_tasks, rng: np.random.Generator) -> list[str]:
    del rng
    return [layout_text(task) for task in train_tasks]

  def compose(first: KeyDoorTask, second: KeyDoorTask, rng: np.random.Generator) -> str:
    # The first world's objects in a grid grown towards the OOD size (larger in at least one
    # side), the goal moved to the second world's goal where it fits: larger than training's.
    width = int(rng.integers(first.width, most_width + 1))
    height = int(rng.integers(first.height, most_height + 1))
    if (width, height) == (first.width, first.height):
      width, height = most_width, most_height
    fields = {f.name: getattr(first, f.name) for f in dataclasses.fields(first)}
    fields.update(width=width, height=height)
    if first.door_x < second.goal_x < width and second.goal_y < height:
      fields.update(goal_x=second.goal_x, goal_y=second.goal_y)
    return layout_text(_Fields(fields))

  return _proposals.ProposalGrammar(
      prompt=PROPOSER_PROMPT, to_task=to_task, key=layout_text,
      reserved_split=reserved_split, difficulty=difficulty, demonstrations=demonstrations,
      compose=compose)


def from_record(record) -> KeyDoorTask:
  return KeyDoorTask(**record)


def suite(config, data_dir: str):
  """The key-door suite of `config.keydoor` (`tasks.TaskSuite`); generated, nothing written."""
  del data_dir
  settings = config.keydoor
  splits = generate_suite(settings)

  def score(episode):
    terms = reward_terms(episode)
    return float(compose_reward(terms, settings)), terms

  def expert(tasks, rng, max_tool_calls):
    return run_expert_episodes(tasks, toolbox_for=toolbox_for, rng=rng,
                               max_tool_calls=max_tool_calls, config=settings)

  def make_jax_env(tasks, tokenizer, rollout_config):
    return jax_env(tasks, tokenizer, rollout_config, settings)

  return _registry.TaskSuite(
      name="keydoor", splits=splits, eval_splits=("heldout", "heldout_ood", "calibration"),
      toolbox_for=toolbox_for, score=score, reward_terms=REWARD_TERMS, expert=expert,
      task_from_record=from_record, jax_env=make_jax_env,
      proposals=proposal_grammar(settings))
