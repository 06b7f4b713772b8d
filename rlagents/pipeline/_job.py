"""What the phases of one run share: the policy, its samplers, the task suite, the device mesh.

Host code. A `Job` is built once per run from the config and the workdir; phases read it and
never change it. What changes during a run is set by the job and its loop only: `outputs`,
`learned_scorer` (the reward model), `running` (its statistics) and `drift_monitor`.
"""

import dataclasses
import functools
import os
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
import tensorflow_datasets as tfds
from flax.training import train_state
from jax.experimental import multihost_utils

from rlagents import episodes as episodes_lib
from rlagents import learners
from rlagents import networks
from rlagents import parallel
from rlagents import rewards
from rlagents import rollout as rollout_lib
from rlagents import tasks as tasks_lib
from rlagents.pipeline import _config
from rlagents.pipeline import _policy_init


class JobError(RuntimeError):
  """A problem with the job's inputs or workdir, reported as one line."""


def data_rng(seed: int, *path: int) -> np.random.Generator:
  """The host generator of one stream of the run (a phase's step, an evaluation point)."""
  return np.random.default_rng([seed, *path])


def fetch(tree) -> Any:
  """Host copies of (replicated) device values, also when they span several processes."""

  def one(x):
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
      if x.sharding.is_fully_replicated:
        return np.asarray(x.addressable_data(0))
      return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)

  return jax.tree.map(one, tree)


def count_parameters(tree) -> int:
  return int(sum(np.prod(np.shape(x)) for x in jax.tree.leaves(tree)))


def load_suite(config: _config.AgentJobConfig, workdir: str) -> tasks_lib.TaskSuite:
  """The config's task suite, its data under `workdir/data`."""
  tfds.disable_progress_bar()
  try:
    factory = tasks_lib.suite_factory(config.task)
  except tasks_lib.SuiteError as error:
    raise JobError(str(error)) from None
  data_dir = os.path.join(workdir, "data")
  if jax.process_count() == 1:
    return factory(config, data_dir)
  # Several processes share the workdir: process 0 writes the suite's data, the others read it.
  suite = factory(config, data_dir) if jax.process_index() == 0 else None
  multihost_utils.sync_global_devices("rlagents task data written")
  return suite if suite is not None else factory(config, data_dir)


class Job:
  """The state shared by the phases of one run.

  Attributes:
    config, workdir: the run's.
    suite: the task suite (`tasks.TaskSuite`): splits, guarded tools, verifier, expert.
    tokenizer, model: the policy's.
    format: how episodes become token ids (`episodes.MarkerFormat`, or `episodes.ChatFormat`
      with the checkpoint's chat template when `config.format == 'chat'`).
    lora: the LoRA config when only adapters train, else None.
    apply_fn: the policy's apply on its train-state parameters (LoRA merged inside).
    sampler, sampler_greedy, sampler_eval: segment samplers at the rollout's, 0 and the
      evaluation's temperature.
    mesh: the device mesh the update steps run on (`config.mesh`).
    outputs: the run's metrics and audit log (`_outputs.Outputs`), set by the job.
    learned_scorer: `tokens [N, T] -> scores [N]` of the reward model when the soft reward is
      on (set by the reward-model step before RL), else None.
    running: the soft reward's running statistics.
    drift_monitor: the proxy-drift monitor of the RL phase's evaluation points.
  """

  def __init__(self, config: _config.AgentJobConfig, workdir: str):
    self.config = config
    self.workdir = workdir
    self.suite = load_suite(config, workdir)
    try:
      policy = _policy_init.initial_policy(config.model, config.init_from,
                                           getattr(self.suite, "characters", ""), config.format)
    except _policy_init.PolicyInitError as error:
      raise JobError(str(error)) from None
    self.tokenizer = policy.tokenizer
    if config.format == "chat":
      try:
        self.format = episodes_lib.ChatFormat(
            self.tokenizer, lambda task: self.suite.toolbox_for(task).specs, config.chat,
            source=config.init_from)
      except episodes_lib.FormatError as error:
        raise JobError(f"init_from: {error}") from None
    else:
      self.format = episodes_lib.MarkerFormat(self.tokenizer)
    self.model = networks.Transformer(policy.model_config)
    self.pretrained_params = policy.params
    # With LoRA the trained parameters are {'base': frozen variables, 'lora': adapters}, and
    # `apply_fn` runs the model on the merged weights; the base gets no gradient (stop_gradient,
    # so XLA drops its weight-gradient products) and no update (`train_state`'s optimizer).
    self.lora = config.lora.lora_config() if config.lora.rank else None
    if self.lora is None:
      self.apply_fn = self.model.apply
    else:
      self._merge = jax.jit(functools.partial(networks.merge_lora, config=self.lora))
      model, lora = self.model, self.lora

      def apply_lora(params, *args, **kwargs):
        merged = networks.merge_lora(jax.lax.stop_gradient(params["base"]), params["lora"],
                                     config=lora)
        return model.apply(merged, *args, **kwargs)

      self.apply_fn = apply_lora
    stops = self.format.stop_tokens
    self.sampler = rollout_lib.make_sampler(self.model, self.tokenizer, config.rollout,
                                            stop_tokens=stops)
    self.sampler_greedy = rollout_lib.make_sampler(
        self.model, self.tokenizer, dataclasses.replace(config.rollout, temperature=0.0),
        stop_tokens=stops)
    self.sampler_eval = rollout_lib.make_sampler(
        self.model, self.tokenizer,
        dataclasses.replace(config.rollout, temperature=config.eval.temperature),
        stop_tokens=stops)
    self.mesh = parallel.make_mesh(config.mesh)
    self.outputs = None
    self.learned_scorer = None
    self.running = rewards.RunningMeanStd()
    self.drift_monitor = rewards.ProxyDriftMonitor(config.proxy_drift)

  @property
  def sft_steps(self) -> int:
    return self.config.sft.num_steps

  def rng(self, *path: int) -> np.random.Generator:
    return data_rng(self.config.seed, *path)

  # ---- episodes ----

  def score(self, episodes: Sequence[episodes_lib.Episode]) -> None:
    """Sets each episode's reward and reward terms (the suite's verifier and shaping)."""
    self.suite.score_all(episodes)

  def expert_episodes(self, tasks, rng) -> list[episodes_lib.Episode]:
    if self.suite.expert is None:
      raise JobError(f"task suite {self.suite.name!r} has no expert: SFT needs demonstrations")
    episodes = self.format.adopt(
        self.suite.expert(list(tasks), rng, self.config.rollout.max_tool_calls),
        self.suite.toolbox_for)
    self.score(episodes)
    return episodes

  def policy_episodes(self, params, tasks, *, key, rng,
                      sampler=None) -> episodes_lib.RolloutBatch:
    """Episodes of the policy with train-state `params` on `tasks`, through the guarded tools.

    `params` may be a `rollout.LatestParams` of sampler-ready weights (`policy_params`), read
    at every turn (asynchronous training).
    """
    if not isinstance(params, rollout_lib.LatestParams):
      params = self.policy_params(params)
    batch = rollout_lib.sample_episodes(
        params, tasks, sampler=sampler or self.sampler,
        tokenizer=self.tokenizer, toolbox_for=self.suite.toolbox_for, config=self.config.rollout,
        key=key, rng=rng, episode_format=self.format)
    self.score(batch.episodes)
    return batch

  def train_episodes(self, params, tasks, *, key, rng,
                     group_size: int) -> episodes_lib.RolloutBatch:
    """`policy_episodes` plus the learned reward term (when configured), for RL updates."""
    batch = self.policy_episodes(params, tasks, key=key, rng=rng)
    if self.learned_scorer is not None:
      rewards.add_learned_reward(batch.episodes, self.learned_scorer(batch.tokens),
                                 self.config.soft_reward, group_size=group_size,
                                 running=self.running)
    return batch

  # ---- parameters and train states ----

  def policy_params(self, params):
    """The model variables that train-state `params` stand for (LoRA merged), whole on this
    process's first device, where the host rollouts sample (the updates run on the mesh)."""
    params = jax.tree.map(self._to_sampling_device, params)
    if self.lora is None:
      return params
    return self._merge(params["base"], params["lora"])

  def _to_sampling_device(self, x):
    device = jax.local_devices()[0]
    if not isinstance(x, jax.Array):
      return jax.device_put(x, device)
    if x.is_fully_addressable:
      return x if x.devices() == {device} else jax.device_put(x, device)
    if x.sharding.is_fully_replicated:
      return x.addressable_data(0)
    return jax.device_put(multihost_utils.process_allgather(x, tiled=True), device)

  def train_state(self, params, optimizer: learners.OptimizerConfig):
    """A train state over `params`; with LoRA only the adapters get an optimizer (and state)."""
    if self.lora is None:
      return learners.create_train_state(self.model, params, optimizer)
    labels = lambda p: {"base": jax.tree.map(lambda _: "frozen", p["base"]),
                        "lora": jax.tree.map(lambda _: "train", p["lora"])}
    tx = optax.multi_transform(
        {"train": learners.make_optimizer(optimizer), "frozen": optax.set_to_zero()}, labels)
    return train_state.TrainState.create(apply_fn=self.apply_fn, params=params, tx=tx)

  def init_params(self):
    """The policy's starting parameters (pretrained or freshly initialised; with adapters)."""
    if self.pretrained_params is not None:
      # A copy: the update steps donate their input buffers.
      params = jax.tree.map(jnp.copy, self.pretrained_params)
    else:
      length = self.config.rollout.max_length
      tokens = jnp.zeros((1, length), jnp.int32)
      positions = jnp.arange(length, dtype=jnp.int32)[None]
      params = self.model.init(jax.random.PRNGKey(self.config.seed), tokens, positions)
    if self.lora is None:
      return params
    adapters = networks.init_lora(jax.random.PRNGKey(self.config.seed + 2), params,
                                  config=self.lora)
    return {"base": params, "lora": adapters}

  # ---- devices ----

  def place_state(self, tree):
    """A train state (or parameters) on the job's mesh by `parallel`'s sharding rules (large
    arrays split over 'fsdp', the rest replicated); every process passes the same values.
    Jitted steps on placed inputs run partitioned over the mesh (XLA's SPMD partitioner)."""
    return parallel.shard_state(tree, self.mesh, min_size=self.config.mesh.fsdp_min_size)

  def place_batch(self, batch):
    """A batch on the job's mesh, its leading dimension split over ('data', 'fsdp').

    Host arrays are the whole batch, the same on every process (each process keeps its rows);
    device arrays are re-laid out.
    """
    return jax.tree.map(self._place_rows, batch)

  def _place_rows(self, x):
    if isinstance(x, jax.Array):
      spec = jax.sharding.PartitionSpec(parallel.AXES)
      return jax.device_put(x, jax.sharding.NamedSharding(self.mesh, spec))
    rows = np.asarray(x)
    count, index = jax.process_count(), jax.process_index()
    if len(rows) % count:
      raise ValueError(f"a batch of {len(rows)} rows does not split over {count} processes")
    size = len(rows) // count
    return parallel.shard_batch(rows[index * size:(index + 1) * size], self.mesh)
