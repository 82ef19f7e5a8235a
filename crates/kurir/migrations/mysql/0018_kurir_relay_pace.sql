-- The relay's pace, shared by every process of an installation (issue 27; the PostgreSQL
-- migration of the same number says why). MySQL has no relay cursor (the relay marks each row
-- dispatched), so the time of the last batch has a one-row table of its own. A paced batch takes
-- this row's lock without waiting and goes ahead only if the last batch is older than the poll
-- interval; every batch sets the time in its transaction.
CREATE TABLE kurir_relay_pace (
    one      TINYINT     NOT NULL PRIMARY KEY CHECK (one = 1),
    moved_at DATETIME(3) NOT NULL
);
INSERT INTO kurir_relay_pace (one, moved_at) VALUES (1, UTC_TIMESTAMP(3));
