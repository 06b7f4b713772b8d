"""PPO for the language agent: a value network, GAE over the policy's tokens, clipped updates."""

from rlagents import episodes as episodes_lib
from rlagents import learners
from rlagents import networks
from rlagents.learners import ppo_agent
from rlagents.pipeline.phases import _base


class PPO(_base.Phase):
  """PPO from the SFT policy, the SFT policy as the KL reference (`config.ppo`)."""
  name, phase_id, online = "ppo", 5, True

  def settings(self, config):
    return config.ppo

  def validate(self, config):
    if config.lora.rank:
      return f"algorithm='ppo' trains all parameters; lora.rank={config.lora.rank} needs 'grpo'"
    if config.diversity_weight:
      return (f"diversity_weight={config.diversity_weight} penalises repeats within a group of "
              "episodes per task; algorithm='ppo' samples one episode per task")
    if config.soft_reward.normalization == "group":
      return ("soft_reward.normalization='group' needs groups of episodes per prompt (GRPO); "
              "use 'running' with PPO")
    return None

  def init_state(self, job, params):
    ppo = job.config.ppo
    value_model = networks.Transformer(networks.reward_model_config(job.model.config))
    return learners.create_train_state(
        value_model, ppo_agent.init_params(params, job.model.config, critic=ppo.critic),
        ppo.optimizer)

  def policy_params(self, state):
    return state.params["policy"]

  def prepare(self, job, state, reference):
    return (learners.PPOAgentStep(job.config.ppo, place_batch=job.place_batch),
            job.place_state(reference))

  def step(self, job, context, state, *, step, key, rng):
    update, reference = context
    tasks = self.draw_tasks(job, rng, job.config.ppo.episodes_per_step)
    rollout = job.train_episodes(self.policy_params(state), tasks, key=key, rng=rng,
                                 group_size=1)
    batch = episodes_lib.trim_to_longest(_base.policy_batch(rollout))
    state, metrics = update(state, reference, batch, rng)
    return _base.StepResult(state, metrics, rollout)

  def panels(self, config):
    return {"KL to SFT": ["ppo/kl_reward_penalty"]}


PPO_PHASE = _base.register_phase(PPO())
