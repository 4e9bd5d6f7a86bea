-- step_states: the abstract state each step is in, one row per step, for state coverage.
--
-- An agent state σ = (location, variables, history) is abstracted to
--   agent_name | kind[:tool] of the step | kind[:tool] of the previous step in the trial
-- i.e. where the agent is (which agent, doing what) plus a one-step history window
-- ('start' for the first step). Text, arguments and counters are left out on purpose:
-- they would make every state unique and state coverage meaningless. State coverage is
-- 1 - exp(-|distinct states| / λ).
--
-- An agent or tool name is written with \ before each \ and | in it, so that two different
-- states never read the same: an agent named `a | tool:b` in an llm step read as agent `a`
-- in a step of a tool named `b | llm`. Ordinary names read as they are (and skip the
-- replace(), which copies every name: a tenth more time for the 10M-span bench lake's states).
--
-- abstract_states counts these per trial; the coverage sets count them per state straight
-- from here, which skips a (trial, state) grouping of every step.
--
-- The previous step is found by a join on seq - 1 (seq numbers a trial's steps 1, 2, ...
-- without gaps), not by lag() over the trial: that window sorts every step and took half
-- as long again on the 10M-span bench lake.
CREATE OR REPLACE VIEW step_states AS
WITH labelled AS (
    SELECT trace_id, seq,
        CASE WHEN contains(agent_name, '|') OR contains(agent_name, '\')
             THEN replace(replace(agent_name, '\', '\\'), '|', '\|') ELSE coalesce(agent_name, '') END AS agent,
        step_kind || coalesce(':' || CASE WHEN contains(tool_name, '|') OR contains(tool_name, '\')
                                          THEN replace(replace(tool_name, '\', '\\'), '|', '\|') ELSE tool_name END, '') AS action
    FROM steps
)
SELECT s.trace_id, s.seq, s.agent || ' | ' || s.action || ' | ' || coalesce(p.action, 'start') AS state
FROM labelled s
LEFT JOIN labelled p ON p.trace_id = s.trace_id AND p.seq = s.seq - 1;
