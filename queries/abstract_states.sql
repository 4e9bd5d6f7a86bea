-- abstract_states: the state abstraction π of paper Def. 4.6, one row per (trial, abstract
-- state) with how often the trial visited it. The abstraction is step_states'.
CREATE OR REPLACE VIEW abstract_states AS
SELECT trace_id, state, count(*) AS visits
FROM step_states
GROUP BY ALL;
