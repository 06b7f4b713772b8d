"""Episode formats: the marker format as before, and chat templates with tools, token-exact."""

import json

import jax
import numpy as np
import pytest

from experiments import chat_checkpoint
from rlagents import episodes
from rlagents import guardrails
from rlagents import hf
from rlagents import rollout
from rlagents import sampling
from rlagents import tasks
from rlagents import tools
from rlagents.hf import chat_models
from rlagents.tasks import calculator_expert

STYLES = ("qwen2.5", "llama3.1")
TOOLBOX = tools.ToolBox([tools.CalculatorTool(failure_rate=0.3)])


def _task(expression, index=0):
  return tasks.CalculatorTask(task_id=f"t{index}", expression=expression,
                              answer=tools.evaluate_expression(expression), split="train",
                              num_operands=expression.count("+") + expression.count("*") + 1,
                              max_digits=2)


@pytest.fixture(scope="module", params=STYLES)
def chat(request):
  """A style's BPE tokenizer (trained here on calculator conversations) and its format."""
  schema = [episodes.tool_schema(TOOLBOX.spec("calc"))]
  texts = chat_models.conversation_texts(
      request.param, chat_checkpoint.calculator_examples(400), schema,
      system_prompt=episodes.DEFAULT_SYSTEM_PROMPT)
  tokenizer = chat_models.build_bpe_tokenizer(texts, style=request.param, vocab_size=600)
  return episodes.ChatFormat(tokenizer, lambda task: TOOLBOX.specs, source=request.param)


def _expert_episodes(chat, count=40, seed=0):
  expert = calculator_expert.NoisyExpert(calculator_expert.NoisyExpertConfig(malformed_rate=0.3))
  problems = [_task(e, i) for i, e in enumerate(["12*34", "5+6*7", "99+10*2"] * (count // 3))]
  played = calculator_expert.run_expert_episodes(expert, problems, toolbox=TOOLBOX,
                                                 rng=np.random.default_rng(seed),
                                                 max_tool_calls=3)
  return chat.adopt(played, lambda task: TOOLBOX)


def _final_ids(chat, episode):
  """The whole conversation tokenised at once, as `apply_chat_template` renders it."""
  text = chat.tokenizer.apply_chat_template(chat.messages(episode), tools=chat.tools(episode.task),
                                            tokenize=False)
  return chat.tokenizer.encode(text, add_special_tokens=False)


def test_each_style_is_read_off_its_template(chat):
  # The syntax, the turn-end token the sampler stops on, and the tools in the prompt.
  want = {"<|im_end|>": "hermes", "<|eot_id|>": "llama3_json"}
  assert want[chat.turn_end] == chat.syntax
  assert chat.stop_tokens[0] == chat.tokenizer.convert_tokens_to_ids(chat.turn_end)
  prompt = chat.tokenizer.decode(chat.prompt_ids(_task("1+2")))
  assert '"name": "calc"' in prompt and prompt.count("1+2=?") == 1


def test_demonstrations_are_the_templates_rendering_of_the_final_conversation(chat):
  played = _expert_episodes(chat)
  assert {a.result.status for e in played for a in e.actions if a.result} >= {
      tools.CallStatus.OK, tools.CallStatus.MALFORMED, tools.CallStatus.TRANSIENT_ERROR}
  for episode in played:
    pieces = chat.pieces(episode)
    ids = [i for piece, _ in pieces for i in piece]
    final = _final_ids(chat, episode)
    # Turn by turn equals the whole conversation at once; what remains is what the template
    # writes after the last turn-end token (Qwen's newline, nothing for Llama).
    tail = chat.tokenizer.encode(chat._after_turn(chat.messages(episode), episode.task)[1],
                                 add_special_tokens=False)
    assert final == ids + tail
    # Weight 1 exactly on the assistant turns, each ending with the turn-end token.
    for piece, weight in pieces[1:]:
      if weight:
        assert piece[-1] == chat.stop_tokens[0]
      else:
        assert chat.stop_tokens[0] not in piece[:1]


class ScriptedSampler:
  """Stands in for the model: writes each row's next scripted ids (a turn and its stop)."""

  def __init__(self, ids_per_row):
    self.ids = [list(s) for s in ids_per_row]

  def __call__(self, params, tokens, lengths, active, key):
    del params, key
    tokens, lengths = np.array(tokens), np.array(lengths)
    generated = np.zeros(tokens.shape, bool)
    for b in np.flatnonzero(active):
      ids = self.ids[b].pop(0)
      tokens[b, lengths[b]:lengths[b] + len(ids)] = ids
      generated[b, lengths[b]:lengths[b] + len(ids)] = True
      lengths[b] += len(ids)
    return sampling.SegmentOutput(tokens=tokens, lengths=lengths,
                                  logprobs=np.where(generated, -0.5, 0.0).astype(np.float32),
                                  generated_mask=generated,
                                  stop_token=np.full(len(lengths), -1, np.int32))


def _rollout(chat, problems, ids_per_row, max_length=400):
  return rollout.sample_episodes(
      None, problems, sampler=ScriptedSampler(ids_per_row), tokenizer=chat.tokenizer,
      toolbox=tools.ToolBox([tools.CalculatorTool()]), episode_format=chat,
      config=rollout.RolloutConfig(batch_size=4, max_length=max_length),
      key=jax.random.PRNGKey(0), rng=np.random.default_rng(0))


def _turn(chat, text):
  return chat.tokenizer.encode(text, add_special_tokens=False) + [chat.stop_tokens[0]]


def test_rollout_appends_sampled_ids_and_the_templates_delta(chat):
  syntax = episodes.call_syntax(chat.syntax)
  calc = TOOLBOX.spec("calc")
  problems = [_task("12*34"), _task("5+6*7", 1)]
  scripts = [[_turn(chat, syntax.write_call("calc", "12*34", calc)), _turn(chat, "408")],
             [_turn(chat, syntax.write_call("calc", "5+6*", calc)),
              _turn(chat, syntax.write_call("calc", "5+6*7", calc)), _turn(chat, "47")]]
  sampled = [[i for turn in s for i in turn] for s in scripts]
  batch = _rollout(chat, problems, scripts)
  for row, episode in enumerate(batch.episodes):
    assert episode.answer == str(problems[row].answer)
    used = int(np.max(np.nonzero(batch.tokens[row])[0])) + 1
    # loss_mask is 1 exactly on the sampled ids, which stand in the buffer as sampled.
    np.testing.assert_array_equal(batch.tokens[row][batch.loss_mask[row] == 1], sampled[row])
    assert np.all(batch.logprobs[row][batch.loss_mask[row] == 0] == 0)
    # The whole buffer is what the template renders of the final conversation.
    final = _final_ids(chat, episode)
    assert list(batch.tokens[row, :used]) == final[:used]
  assert [r.status for r in batch.episodes[1].calls] == [tools.CallStatus.INVALID_ARGUMENTS,
                                                         tools.CallStatus.OK]


def test_where_incremental_and_final_renderings_differ_the_rollout_keeps_what_was_sampled(
    chat):
  """Two differences a chat template makes between the tokens the policy sampled and
  `apply_chat_template` of the final messages; the rollout keeps the sampled ones."""
  problem = _task("12*34")
  name_key = "arguments" if chat.syntax == "hermes" else "parameters"
  # 1. Re-serialised calls: the policy wrote compact JSON; the template writes the call from
  #    its `tool_calls` with `tojson`, spaced. The call is the same, the text is not.
  compact = json.dumps({"name": "calc", name_key: {"input": "12*34"}}, separators=(",", ":"))
  if chat.syntax == "hermes":
    compact = f"<tool_call>\n{compact}\n</tool_call>"
  # 2. Non-canonical ids: the policy spelled the answer's text in other pieces than BPE would
  #    (here one byte-level token per character of a word); decoding gives the same text.
  word = "result"
  spelled = [chat.tokenizer.convert_tokens_to_ids(c) for c in word]
  assert chat.tokenizer.decode(spelled) == word
  assert chat.tokenizer.encode(word, add_special_tokens=False) != spelled
  script = [_turn(chat, compact), spelled + chat.tokenizer.encode(
      " 408", add_special_tokens=False) + [chat.stop_tokens[0]]]
  batch = _rollout(chat, [problem], [list(script)])
  episode = batch.episodes[0]
  assert episode.calls[0].status == tools.CallStatus.OK and episode.answer == "result 408"
  tokens = [int(t) for t in batch.tokens[0] if t]
  np.testing.assert_array_equal(batch.tokens[0][batch.loss_mask[0] == 1],
                                script[0] + script[1])
  final = _final_ids(chat, episode)
  final_text, sampled_text = chat.tokenizer.decode(final), chat.tokenizer.decode(tokens)
  canonical = episodes.call_syntax(chat.syntax).write_call("calc", "12*34", TOOLBOX.spec("calc"))
  assert compact not in final_text and compact in sampled_text
  # Apart from the call's spacing the texts agree (the final rendering may go on after the
  # last turn-end token), and the spelled-out word is there, in BPE's own ids.
  assert final_text.startswith(sampled_text.replace(compact, canonical))
  assert not set(spelled) <= set(final)


def test_a_turn_cut_off_before_its_end_token_ends_the_episode(chat):
  ids = chat.tokenizer.encode("<tool_call>\n{\"name\"", add_special_tokens=False)
  batch = _rollout(chat, [_task("1+2")], [[ids]])
  episode = batch.episodes[0]
  assert episode.truncated and episode.actions[-1].kind == "truncated"
  assert batch.loss_mask[0].sum() == len(ids)


@pytest.mark.parametrize("syntax", ["hermes", "llama3_json"])
def test_json_calls_reach_the_tools_in_their_own_form(syntax):
  written = episodes.call_syntax(syntax)
  spec = TOOLBOX.spec("calc")
  reading = written.interpret(written.write_call("calc", "2*(3+4)", spec), TOOLBOX)
  assert reading == episodes.Reading("call", "calc(2*(3+4))")
  assert written.interpret(" 14 ", TOOLBOX) == episodes.Reading("answer", "14")
  # Malformed JSON goes to the tools as written, which call it malformed.
  broken = written.write_malformed("calc(2*3")
  result = TOOLBOX.execute(written.interpret(broken, TOOLBOX).body, np.random.default_rng(0))
  assert result.status == tools.CallStatus.MALFORMED
  # An object-schema tool gets canonical JSON; its schema is listed as it is.
  search = tools.DocumentSearchTool({"d1": "paris is in france"}, top_k=1)
  box = tools.ToolBox([search])
  call = json.dumps({"name": "search", written.arguments_key: {"query": "paris"}})
  if syntax == "hermes":
    call = f"<tool_call>\n{call}\n</tool_call>"
  body = written.interpret(call, box).body
  assert body == 'search({"query": "paris"})'
  assert box.execute(body, np.random.default_rng(0)).status == tools.CallStatus.OK
  assert episodes.tool_schema(search.spec)["function"]["parameters"] == search.spec.parameters


def test_chat_episodes_replay_from_the_audit_record(chat):
  for episode in _expert_episodes(chat, count=12):
    episode.reward, episode.reward_terms = 1.0, {}
    record = episode.to_record()
    assert record["syntax"] == chat.syntax
    suite = guardrails.ReplaySuite(lambda d: tasks.CalculatorTask(**d), lambda task: TOOLBOX,
                                   lambda e: (1.0, {}))
    report = guardrails.replay_record(json.loads(json.dumps(record)), suite, max_tool_calls=3)
    assert report.reproduced, report.divergence


def test_marker_format_is_the_rollouts_default():
  tokenizer = hf.build_char_tokenizer()
  marker = episodes.MarkerFormat(tokenizer)
  task = _task("12*3+4")
  assert marker.prompt_ids(task) == tokenizer.encode("<bos>12*3+4=?", add_special_tokens=False)
  assert marker.stop_tokens == tuple(tokenizer.convert_tokens_to_ids(
      ["</call>", "</answer>", "<eos>"]))
  assert "syntax" not in episodes.Episode(task).to_record()


def _tokenizer(template):
  texts = ["12+34=? 46 calc"] * 20
  return chat_models.build_bpe_tokenizer(texts, style="qwen2.5", vocab_size=300,
                                         template=template)


def test_bad_chat_checkpoints_are_refused_in_one_line():
  specs = lambda task: TOOLBOX.specs
  with pytest.raises(episodes.FormatError, match=r"^/ckpt: the tokenizer has no chat_template"):
    episodes.ChatFormat(_tokenizer(""), specs, source="/ckpt")
  no_tools = ("{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
              "{%- endfor %}")
  with pytest.raises(episodes.FormatError,
                     match=r"^/ckpt: the chat_template does not render tools"):
    episodes.ChatFormat(_tokenizer(no_tools), specs, source="/ckpt")
  xml_calls = chat_models.QWEN_STYLE_TEMPLATE.replace("<tool_call>", "<function>")
  with pytest.raises(episodes.FormatError,
                     match=r"^/ckpt: the chat_template writes tool calls in a syntax the parser "
                     r"does not know .*\(set chat.syntax\)$"):
    episodes.ChatFormat(_tokenizer(xml_calls), specs, source="/ckpt")
  with pytest.raises(ValueError, match=r"^chat.syntax: tool-call syntax 'xml' is not known"):
    episodes.ChatSettings(syntax="xml")
  with pytest.raises(episodes.CallSyntaxError, match=r"^syntax: tool-call syntax 'xml'"):
    episodes.call_syntax("xml")
