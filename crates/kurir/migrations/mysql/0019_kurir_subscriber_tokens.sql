-- Subscriber tokens and scoped listings (issue 29): a subscriber token's lists, and an operator's
-- lists filtered by `subscriber_id=`, walk one subscriber's rows in the listing's order.
--
-- Endpoints and tokens need nothing here: InnoDB gave their `subscriber_id` foreign keys (0016)
-- an index, and every secondary index ends with the primary key, so it is (subscriber_id, id)
-- already. The replays' column has no foreign key (a replay outlives its subscriber until
-- retention), so its index is made here: the replays confined to a subscriber, newest first.
CREATE INDEX kurir_replays_subscriber ON kurir_replays (subscriber_id, id);
