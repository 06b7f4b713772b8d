"""A learned simulator for the key-door text world: a small decoder transformer, as an environment.

The world model reads what the real environment's transition depends on, the prompt (the
layout), the last observation of a valid call (the state) and the call, and writes the next
observation, the call's effect (what the reward sees: nothing, the key, the door, wasted) and
whether the agent then stands on the goal (what `done` and success are read from):

    <bos>{prompt}<obs>{last observation}</obs><call>{action}</call>
        ->  <obs>{next}</obs>{e}{g}<eos>

with `e` the effect digit (`envs.EFFECT_*`) and `g` 0 or 1. It is trained on real transitions
read from the audit log (`transitions_from_audit`), only on the written part (teacher forcing),
and predicts greedily. `TextWorldModelEnv` wraps it as a `envs.TextEnvironment`: the same tasks,
episode state, rules of the episode (call limits, answers, buffer) and reward terms as
`envs.KeyDoorTextEnv`, whose `transition` it replaces with the model's prediction, so a policy
rolls out in imagination with `rollout.make_jit_rollout` exactly as in the real world. Parsing a
call is the tool's interface, not the world's dynamics: a call text that is no action gets the
parser's error observation without asking the model.

The model's predictive entropy (the largest per-token entropy over what it wrote; infinite for
an output it could not parse) is kept per episode (`KeyDoorEpisode.uncertainty`, the largest over
its calls), to route uncertain states to the real environment.
"""

import dataclasses
import json
from typing import Any, Iterable, Sequence

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax

from rlagents import envs
from rlagents import episodes as episodes_lib
from rlagents import networks
from rlagents import tools as tools_lib

CONTEXT = 112  # prompt (<= 44) + last observation (<= 34) + call (<= 13) + target (<= 37)
OUTPUT = 40    # <obs> + 32 + </obs> + effect + goal + <eos>, rounded up


@dataclasses.dataclass(frozen=True)
class TextTransition:
  """One real transition: the layout, the state before, the call, and what followed.

  Attributes:
    prompt: the world's prompt (its layout).
    observation: the last observation of a valid call before this one (the state).
    action: the call, one of `envs.KeyDoorTextEnv.ACTIONS`.
    next_observation: the observation the call returned.
    effect: `envs.EFFECT_*`, what the reward saw.
    at_goal: the agent stood on the goal afterwards.
  """
  prompt: str
  observation: str
  action: str
  next_observation: str
  effect: int
  at_goal: bool


def _effect(before: str, after: str) -> int:
  if any(after.startswith(e) for e in envs.KeyDoorTextEnv.EVENTS[1:]):
    return envs.EFFECT_WASTED
  words_before, words_after = set(before.split(" ")), set(after.split(" "))
  if "key" in words_after - words_before:
    return envs.EFFECT_KEY
  if "open" in words_after - words_before:
    return envs.EFFECT_DOOR
  return envs.EFFECT_NONE


def text_start_observation(prompt: str) -> str:
  """The state text of a world's first cell, read from its prompt (`... at x,y`).

  Args:
    prompt: a key-door task's prompt.
  """
  return prompt.rsplit(" at ", 1)[1]


def transitions_from_audit(path: str, *, suite: str = "keydoor",
                           imagined: bool = False) -> list[TextTransition]:
  """The valid calls of every logged key-door episode as transitions (host code).

  Args:
    path: an audit log (`audit/episodes.jsonl`).
    suite: the suite whose records are read (records of other suites are skipped).
    imagined: also read episodes marked `imagined` (never, to train on reality only).
  """
  out = []
  with open(path) as f:
    for line in f:
      record = json.loads(line)
      if record.get("suite", "calculator") != suite:
        continue
      if record.get("imagined") and not imagined:
        continue
      last = text_start_observation(record["prompt"])
      for action in record["actions"]:
        if action["kind"] != "call" or action["status"] != "ok":
          continue
        observation = action["observation"]
        call = f"{action['tool']}({action['arguments']})"
        out.append(TextTransition(record["prompt"], last, call, observation,
                                  _effect(last, observation), observation.endswith(" goal")))
        last = observation
  return out


def encode_text_transitions(transitions: Sequence[TextTransition], tokenizer
                       ) -> dict[str, np.ndarray]:
  """`tokens [N, CONTEXT]`, `loss_mask` (1 on the written part) and `event [N]` (1 where the
  call had an effect the reward sees or reached the goal) of transitions.

  Raises:
    ValueError: a transition does not fit in `CONTEXT` tokens.

  Args:
    transitions: the real transitions.
    tokenizer: the character tokenizer.
  """
  tokens = np.zeros((len(transitions), CONTEXT), np.int32)
  mask = np.zeros((len(transitions), CONTEXT), np.float32)
  event = np.array([t.effect != envs.EFFECT_NONE or t.at_goal for t in transitions], np.float32)
  for i, t in enumerate(transitions):
    context = tokenizer.encode(_context_text(t.prompt, t.observation, t.action),
                               add_special_tokens=False)
    target = tokenizer.encode(f"<obs>{t.next_observation}</obs>{t.effect}{int(t.at_goal)}<eos>",
                              add_special_tokens=False)
    if len(context) + len(target) > CONTEXT:
      raise ValueError(f"transition {i} needs {len(context) + len(target)} tokens > {CONTEXT}")
    tokens[i, :len(context) + len(target)] = context + target
    mask[i, len(context) - 1:len(context) + len(target) - 1] = 1.0  # predicts the target
  return {"tokens": tokens, "loss_mask": mask, "event": event}


def _context_text(prompt: str, observation: str, action: str) -> str:
  return (f"{episodes_lib.BOS}{prompt}{episodes_lib.OBS_OPEN}{observation}{episodes_lib.OBS_CLOSE}"
          f"{episodes_lib.CALL_OPEN}{action}{episodes_lib.CALL_CLOSE}")


def text_world_model_config(vocab_size: int, *, d_model: int = 96, n_layers: int = 2
                 ) -> networks.TransformerConfig:
  """The simulator's transformer (the policy's architecture, smaller).

  Args:
    vocab_size: the tokenizer's size.
    d_model: the width.
    n_layers: the depth.
  """
  return networks.TransformerConfig(vocab_size=vocab_size, d_model=d_model, n_layers=n_layers,
                                    n_heads=4, n_kv_heads=2, d_ff=3 * d_model, max_len=CONTEXT)


@flax.struct.dataclass
class _SimulatorState:
  """The simulator's parameters and optimizer state."""
  params: Any
  opt_state: Any
  step: jax.Array


def _loss(params, model, batch):
  tokens = batch["tokens"]
  positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
  logits, _ = model.apply(params, tokens, positions)
  logp = jax.nn.log_softmax(logits[:, :-1])
  target = jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]
  mask = batch["loss_mask"][:, :-1]
  return -(target * mask).sum() / jnp.maximum(mask.sum(), 1.0)


def _make_fit_step(model: networks.Transformer, optimizer: optax.GradientTransformation):
  """`step(state, batch) -> (state, metrics)`: one teacher-forced update; jitted, pure."""

  def step(state: _SimulatorState, batch):
    loss, grads = jax.value_and_grad(_loss)(state.params, model, batch)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    return _SimulatorState(params, opt_state, state.step + 1), {"world_model/nll": loss}

  return jax.jit(step, donate_argnums=(0,))


def fit_text_world_model(model: networks.Transformer, data: dict[str, np.ndarray], *,
                         steps: int, batch_size: int = 64, learning_rate: float = 2e-3,
                         seed: int = 0, params: Any = None, event_weight: float = 1.0
                         ) -> tuple[Any, list[float]]:
  """Trains (or refits, from `params`) the simulator on encoded transitions; host loop.

  Returns:
    `(params, losses)`, the loss of every 50th step.

  Args:
    model: the simulator's `networks.Transformer`.
    data: `encode_text_transitions` output.
    steps: updates (>= 2).
    batch_size: transitions per update.
    learning_rate: peak AdamW learning rate (warm-up, cosine decay).
    seed: initialisation and batch order.
    params: start from these (a refit), or None for a fresh model.
    event_weight: how many times more often a transition with an `event` (an effect the
      reward sees, or reaching the goal: what reward and done read, and rare) is drawn than
      one without.
  """
  if steps < 2 or batch_size < 1:
    raise ValueError(f"fit needs steps >= 2 and batch_size >= 1, got {steps} and {batch_size}")
  if event_weight <= 0:
    raise ValueError(f"fit needs event_weight > 0, got {event_weight}")
  optimizer = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(
      optax.warmup_cosine_decay_schedule(0.0, learning_rate, min(100, steps // 10), steps,
                                         learning_rate * 0.05), weight_decay=0.0))
  if params is None:
    params = model.init(jax.random.PRNGKey(seed), np.zeros((1, CONTEXT), np.int32),
                        np.arange(CONTEXT)[None])
  state = _SimulatorState(params, optimizer.init(params), jnp.int32(0))
  step = _make_fit_step(model, optimizer)
  rng = np.random.default_rng(seed)
  probabilities = None
  if event_weight != 1.0 and "event" in data:
    weights = np.where(data["event"] > 0, event_weight, 1.0)
    probabilities = weights / weights.sum()
  losses = []
  for i in range(steps):
    rows = (rng.integers(len(data["tokens"]), size=batch_size) if probabilities is None
            else rng.choice(len(data["tokens"]), size=batch_size, p=probabilities))
    state, metrics = step(state, {k: data[k][rows] for k in ("tokens", "loss_mask")})
    if i % 50 == 0 or i == steps - 1:
      losses.append(float(metrics["world_model/nll"]))
  return state.params, losses


def _predict(model: networks.Transformer, params, context: jax.Array, length: jax.Array
            ) -> tuple[jax.Array, jax.Array]:
  """Greedy continuation of one context `[CONTEXT]` (valid `length`): `(tokens [OUTPUT],
  max per-token entropy)`; pure."""

  def body(i, carry):
    tokens, out, entropy = carry
    position = length + i
    logits, _ = model.apply(params, tokens[None], jnp.arange(CONTEXT)[None])
    row = logits[0, jnp.clip(position - 1, 0, CONTEXT - 1)]
    logp = jax.nn.log_softmax(row)
    token = jnp.argmax(row).astype(jnp.int32)
    entropy = jnp.maximum(entropy, -(jnp.exp(logp) * logp).sum())
    tokens = tokens.at[position].set(token, mode="drop")
    return tokens, out.at[i].set(token), entropy

  _, out, entropy = jax.lax.fori_loop(
      0, OUTPUT, body, (context, jnp.zeros(OUTPUT, jnp.int32), jnp.float32(0.0)))
  return out, entropy


def text_world_model_accuracy(model: networks.Transformer, params,
                              transitions: Sequence[TextTransition], tokenizer, *,
                              batch_size: int = 256) -> dict[str, float]:
  """Exact next-observation match, effect (reward) and goal (done) accuracy on transitions.

  Args:
    model, params: the simulator.
    transitions: real transitions (held out from its training).
    tokenizer: the character tokenizer.
    batch_size: predictions per compiled call.
  """
  env = _ParseTables.make(tokenizer)
  run = jax.jit(jax.vmap(lambda c, n: _parse(env, *_predict(model, params, c, n))))
  hits = {"observation": 0, "effect": 0, "at_goal": 0, "all": 0}
  for start in range(0, len(transitions), batch_size):
    chunk = transitions[start:start + batch_size]
    contexts = np.zeros((len(chunk), CONTEXT), np.int32)
    lengths = np.zeros(len(chunk), np.int32)
    for i, t in enumerate(chunk):
      ids = tokenizer.encode(_context_text(t.prompt, t.observation, t.action),
                             add_special_tokens=False)
      contexts[i, :len(ids)], lengths[i] = ids, len(ids)
    obs, obs_len, effect, goal, _ = jax.device_get(run(contexts, lengths))
    for i, t in enumerate(chunk):
      text_ok = tokenizer.decode(obs[i, :obs_len[i]]) == t.next_observation
      effect_ok, goal_ok = int(effect[i]) == t.effect, bool(goal[i]) == t.at_goal
      hits["observation"] += text_ok
      hits["effect"] += effect_ok
      hits["at_goal"] += goal_ok
      hits["all"] += text_ok and effect_ok and goal_ok
  return {k: v / max(len(transitions), 1) for k, v in hits.items()}


@dataclasses.dataclass(frozen=True)
class _ParseTables:
  obs_open: int
  obs_close: int
  digits: tuple[int, ...]

  @classmethod
  def make(cls, tokenizer):
    return cls(tokenizer.convert_tokens_to_ids("<obs>"), tokenizer.convert_tokens_to_ids("</obs>"),
               tuple(tokenizer.convert_tokens_to_ids(list("0123456789"))))


def _parse(tables: _ParseTables, out: jax.Array, entropy: jax.Array):
  """`(observation [32], length, effect, at_goal, entropy)` of a predicted continuation; a
  malformed one (no `<obs>` first or no `</obs>`) is flagged with entropy +inf."""
  index = jnp.arange(OUTPUT)
  close = jnp.where(out == tables.obs_close, index, OUTPUT)
  end = jnp.min(close)
  length = jnp.clip(end - 1, 0, envs.OBSERVATION_WIDTH)
  observation = jnp.where(jnp.arange(envs.OBSERVATION_WIDTH) < length,
                          out[jnp.clip(1 + jnp.arange(envs.OBSERVATION_WIDTH), 0, OUTPUT - 1)], 0)
  digits = jnp.asarray(tables.digits)
  effect_token = out[jnp.clip(end + 1, 0, OUTPUT - 1)]
  goal_token = out[jnp.clip(end + 2, 0, OUTPUT - 1)]
  effect = jnp.argmax(digits == effect_token)
  well_formed = ((out[0] == tables.obs_open) & (end < OUTPUT - 2)
                 & (end - 1 <= envs.OBSERVATION_WIDTH)
                 & jnp.any(digits[:envs.NUM_EFFECTS] == effect_token)
                 & jnp.any(digits[:2] == goal_token))
  return (observation, length, jnp.where(well_formed, effect, envs.EFFECT_NONE).astype(jnp.int32),
          goal_token == digits[1], jnp.where(well_formed, entropy, jnp.inf))


@dataclasses.dataclass(frozen=True, eq=False)
class TextWorldModelEnv(envs.KeyDoorTextEnv):
  """`envs.KeyDoorTextEnv` whose transition is the learned simulator's; see the module doc.

  Attributes:
    model, params, tables: the simulator and its output parser; the rest is
      `envs.KeyDoorTextEnv`'s (prompts, prompt_lengths, layouts, texts, special, max_length,
      max_tool_calls, max_segment_tokens, reward_weights).

  Build with `wrap(real_env, model, params, tokenizer)`. Its episodes' `world` stays the start
  state (the model's state is the text); `uncertainty` is the largest predictive entropy of
  any transition the model made in the episode.
  """
  model: Any = None
  params: Any = None
  tables: Any = None

  @classmethod
  def wrap(cls, real: envs.KeyDoorTextEnv, model: networks.Transformer, params,
           tokenizer) -> "TextWorldModelEnv":
    fields = {f.name: getattr(real, f.name) for f in dataclasses.fields(envs.KeyDoorTextEnv)}
    return cls(**fields, model=model, params=params, tables=_ParseTables.make(tokenizer))

  def _context(self, episode):
    """`<bos>{prompt}<obs>{last}</obs><call>` in a `[CONTEXT]` buffer, and its length."""
    prompt = jnp.asarray(self.prompts)[episode.task, :CONTEXT]
    prompt_length = jnp.asarray(self.prompt_lengths)[episode.task]
    pieces = [(prompt, prompt_length),
              (jnp.array([self.special["<obs>"]], jnp.int32), jnp.int32(1)),
              (episode.observation, episode.observation_length),
              (jnp.array([self.special["</obs>"], self.special["<call>"]], jnp.int32),
               jnp.int32(2))]
    return envs.join_text_pieces(pieces, CONTEXT)

  def transition(self, episode, action, key):
    del key
    actions, action_lengths = self._text("actions")
    context, length = self._context(episode)
    a = jnp.clip(action, 0, len(self.ACTIONS) - 1)
    context, length = envs.join_text_pieces(
        [(context, length), (actions[a], action_lengths[a]),
         (jnp.array([self.special["</call>"]], jnp.int32), jnp.int32(1))], CONTEXT)
    out, entropy = _predict(self.model, self.params, context, length)
    observation, obs_length, effect, at_goal, entropy = _parse(self.tables, out, entropy)
    real = super().transition(episode, action, key=None)  # the parser's error text only
    valid = action >= 0
    return envs.KeyDoorTransition(
        observation=jnp.where(valid, observation, real.observation),
        observation_length=jnp.where(valid, obs_length, real.observation_length),
        effect=jnp.where(valid, effect, envs.EFFECT_INVALID).astype(jnp.int32),
        at_goal=jnp.where(valid, at_goal, episode.at_goal),
        world=episode.world, uncertainty=jnp.where(valid, entropy, 0.0))


class SimulatedWorld:
  """The learned simulator on the host, as the tools of one episode (`move`, `pick`, `open`).

  Args:
    predictor: a `TextHostPredictor`.
    task: the key-door task of the episode.

  For checks and for host rollouts in imagination: each valid call asks the same jitted
  prediction `TextWorldModelEnv` makes in jit, on the same context, so both rollout modes
  write the same tokens. `toolbox()` gives the tools with the key-door call parser.
  """

  def __init__(self, predictor: "TextHostPredictor", task):
    self.predictor, self.prompt = predictor, task.prompt
    self.last = text_start_observation(task.prompt)

  def act(self, action: str) -> str:
    """The predicted observation after `action` (one of the actions); it becomes the state."""
    observation = self.predictor(self.prompt, self.last, action)
    self.last = observation
    return observation

  def toolbox(self) -> tools_lib.ToolBox:
    """The tools of this episode, with the key-door call parser (unguarded)."""
    return tools_lib.ToolBox([_SimulatedTool(self, n) for n in ("move", "pick", "open")],
                             parser=envs.parse_keydoor_action)


class _SimulatedTool:
  def __init__(self, world: SimulatedWorld, name: str):
    self.world = world
    self.spec = tools_lib.ToolSpec(name=name, description=f"simulated key-door: {name}",
                                   parameters={"type": "string"})

  def __call__(self, arguments, rng):
    del rng
    return self.world.act(f"{self.spec.name}({arguments})")


class TextHostPredictor:
  """`predictor(prompt, last_observation, action) -> next observation text`; host code.

  Args:
    model, params: the simulator.
    tokenizer: the character tokenizer.
  """

  def __init__(self, model: networks.Transformer, params, tokenizer):
    self.tokenizer = tokenizer
    tables = _ParseTables.make(tokenizer)
    self._run = jax.jit(lambda c, n: _parse(tables, *_predict(model, params, c, n)))

  def __call__(self, prompt: str, observation: str, action: str) -> str:
    ids = self.tokenizer.encode(_context_text(prompt, observation, action),
                                add_special_tokens=False)
    context = np.zeros(CONTEXT, np.int32)
    context[:len(ids)] = ids
    obs, length, *_ = jax.device_get(self._run(context, np.int32(len(ids))))
    return self.tokenizer.decode(obs[:length])


@dataclasses.dataclass(frozen=True, kw_only=True)
class ImaginationConfig:
  """GRPO with imagined episodes beside real ones (`algorithm='grpo_dyna'`).

  Attributes:
    fraction: of each step's prompt groups rolled out in the learned simulator; the rest in
      the real environment.
    fit_steps: updates of the simulator's first fit, on the real transitions in the audit log
      when the phase starts (the SFT demonstrations at least).
    refit_every: refit the simulator on the log's real transitions every this many steps.
    refit_steps: updates of each refit (from the current parameters).
    batch_size: transitions per simulator update.
    learning_rate: the simulator's peak learning rate.
    event_weight: transitions with an effect the reward sees or that reach the goal are drawn
      this many times more often than the others when fitting (they are rare and decide
      reward and done).
    d_model, n_layers: the simulator's transformer.
    uncertainty_threshold: an imagined group any of whose calls had a predictive entropy
      (nats) above this is rolled out again in the real environment.
    gap_margin: at every evaluation point, calibration success in imagination and in reality
      (the same policy and key) differing by more than this raises the proxy-drift alarm.
    stop_on_gap: after such an alarm, roll every group in the real environment.
  """
  fraction: float = 0.5
  fit_steps: int = 1500
  refit_every: int = 10
  refit_steps: int = 200
  batch_size: int = 64
  learning_rate: float = 2e-3
  event_weight: float = 1.0
  d_model: int = 96
  n_layers: int = 2
  uncertainty_threshold: float = 1.0
  gap_margin: float = 0.2
  stop_on_gap: bool = False

  def __post_init__(self):
    if not 0.0 <= self.fraction <= 1.0:
      raise ValueError(f"imagination.fraction must be in [0, 1], got {self.fraction}")
    for name in ("fit_steps", "refit_steps"):
      if getattr(self, name) < 2:
        raise ValueError(f"imagination.{name} must be >= 2, got {getattr(self, name)}")
    for name in ("refit_every", "batch_size", "d_model", "n_layers"):
      if getattr(self, name) < 1:
        raise ValueError(f"imagination.{name} must be >= 1, got {getattr(self, name)}")
    if self.event_weight <= 0:
      raise ValueError(f"imagination.event_weight must be > 0, got {self.event_weight}")
    if self.uncertainty_threshold <= 0 or self.gap_margin < 0:
      raise ValueError("imagination.uncertainty_threshold must be > 0 and gap_margin >= 0, got "
                       f"{self.uncertainty_threshold} and {self.gap_margin}")
