-- The relay's pace, shared by every process of an installation (issue 27). Each process's relay
-- polls the outbox; with several processes each found a batch a fraction the size one process
-- finds, and every batch costs its statements whatever its size. The cursor now carries when it
-- last moved (the relaying transaction's `now()`), and a process relays what its polling found
-- only once the installation's last batch has had the poll interval to fill. The relay checks it
-- again under the cursor's row lock, so two processes never relay within one interval.
ALTER TABLE kurir_relay_cursor ADD COLUMN moved_at TIMESTAMPTZ NOT NULL DEFAULT now();
