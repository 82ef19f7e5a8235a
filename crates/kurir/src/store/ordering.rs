//! Ordered delivery per aggregate, as the store keeps it (issue 15).
//!
//! **The key.** At fan-out the relay gives a delivery an `ordering_key`
//! ([`crate::endpoint::ordering_key`]) only when its endpoint orders by aggregate and its event
//! names its aggregate; every other delivery keeps `NULL`, so an unordered endpoint writes
//! nothing to the ordering index and its claims test one column. An endpoint's `ordering`
//! therefore applies to deliveries fanned out after it changed, with one exception: the claim
//! reads the endpoint's settings as they are now, so turning ordering off releases the waiting
//! deliveries at once, and a change of `ordering_on_dead_letter` applies at once too.
//!
//! **The claim** (each dialect's `leases.rs`) takes a keyed delivery `d` only while no earlier
//! delivery of its key is unfinished: no row with the same endpoint and key and a smaller
//! `outbox_id` in `pending`, `processing` or `failed`, nor in `dead_letter` when the endpoint's
//! policy is `block` ([`dead_letter_status`]). So only the head of an aggregate is ever
//! claimable, and it stays `processing` until its attempt is recorded: a head that fails waits
//! for its retry as `failed` and still holds the rest back; a lease that runs out, a hand-back
//! or a shutdown release leaves it `failed` or `pending`, still the head. A replay makes a
//! dead-lettered head `pending`: the head again. The check reads the index
//! `kurir_deliveries_ordering` (`endpoint_id, ordering_key, status, outbox_id`; migration
//! 0009): one probe per unfinished status, each reading one entry, whatever the aggregate's
//! history of sent rows (PostgreSQL: `claim_sql!` in `store::postgres::leases`; MySQL:
//! `store::mysql::ordered`; SQLite names the index).
//!
//! **Why two processes never take two deliveries of one aggregate.** A delivery only ever
//! moves from unfinished to finished by its own completion (a replay, an operator's act, is
//! the one way back), and a delivery's predecessors exist no later than it does (fan-out in
//! outbox order, below). So a check that sees a row together with every row committed before
//! it, each as it is or less finished, takes the row only if it is the head; and the head
//! itself is one row, which `FOR UPDATE SKIP LOCKED` and the status check made again on the
//! locked row version give to one claim only (a row another claim has locked is skipped; one
//! it leased meanwhile is `processing` when rechecked). A claim may miss a head finished a
//! moment ago; the next claim takes the successor.
//!
//! - **PostgreSQL**: the claim is one statement under `READ COMMITTED`, whose scan and check
//!   read one snapshot. A row committed after it is not in the scan at all; a row updated
//!   after it is locked and its own new version checked again (`EvalPlanQual`), while the
//!   check still reads the snapshot, in which every predecessor of a row the scan found exists.
//! - **MySQL and MariaDB** (`store::mysql::leases`): InnoDB's locking read sees each row as last
//!   committed, but the check, a consistent read (the outer `FOR UPDATE` locks only the rows
//!   of the outer table), reads the snapshot the statement took at its first evaluation. A
//!   relay batch committing two deliveries of one aggregate during the claim's walk showed both
//!   without a predecessor, and both were leased (issue 17). So that read yields candidates
//!   only: the claim checks them again in a new statement, whose snapshot is taken after every
//!   candidate's commit, and leases only the heads. The claim's transaction is `READ
//!   COMMITTED` whatever the session's level: under `REPEATABLE READ` every read of the
//!   transaction would use its first snapshot. The second check takes no lock and waits for
//!   none.
//! - **SQLite** has one writer: a claim is one `BEGIN IMMEDIATE` transaction and sees every
//!   committed change.
//!
//! **Fan-out in outbox order.** The check compares `outbox_id`s of deliveries that exist, so
//! a later event's delivery must never exist before an earlier one's.
//!
//! - **PostgreSQL and SQLite**: one relay at a time reads past the cursor (`store::cursor`),
//!   each batch committing before the next is read, so deliveries come to exist in cursor
//!   order. On SQLite that is id order, which is commit order. On PostgreSQL it is the order
//!   of `(txid, id)`, `txid` being the id of the inserting transaction, given at its first
//!   write: the events of an aggregate must be written by transactions that take their ids in
//!   the events' order. That holds when the application writes an aggregate's events one
//!   transaction after the other and each transaction's first write is the lock of the
//!   aggregate's row (a transaction waiting for that lock has its id only once the holder has
//!   one). A transaction that wrote something else first may hold an older id than the
//!   aggregate's previous event: the two are then fanned out in the other order when a batch
//!   ends between them.
//! - **MySQL and MariaDB**: concurrent relays take disjoint batches (`SKIP LOCKED`) and could
//!   commit a later batch first; a batch that holds keyed deliveries therefore first waits for
//!   every earlier undispatched outbox row another relay holds ([`EARLIER_BATCHES`]): it
//!   commits after them, and any snapshot that sees its deliveries sees theirs. Outbox order is
//!   id order: events of one aggregate must be committed in id order, which holds when the
//!   application writes an aggregate's events one transaction after the other (as it does when
//!   it locks the aggregate's row to change it).

use crate::endpoint::{Endpoint, OnDeadLetter, Ordering};

/// The status that, besides `pending`, `processing` and `failed`, holds back the later
/// deliveries of an aggregate at `endpoint`: `dead_letter` under the `block` policy; under
/// `skip`, `failed` again (a status already in the list, so nothing more).
pub(crate) fn dead_letter_status(endpoint: &Endpoint) -> &'static str {
    match endpoint.ordering_on_dead_letter {
        OnDeadLetter::Block => "dead_letter",
        OnDeadLetter::Skip => "failed",
    }
}

/// Whether the claim keeps `endpoint`'s keyed deliveries in order (it does not once the
/// endpoint's ordering is turned off).
pub(crate) fn ordered(endpoint: &Endpoint) -> bool {
    endpoint.ordering == Ordering::Aggregate
}

/// Before a relay batch that holds keyed deliveries is written: locks the undispatched outbox
/// rows before its first (`$1`), waiting for another relay's batch that holds them to commit
/// (its rows are then dispatched and drop out). MySQL's, written with `$1` (see
/// `store::sql::positional`).
pub(crate) const EARLIER_BATCHES: &str =
    "SELECT id FROM kurir_outbox WHERE dispatched_at IS NULL AND id < $1 FOR UPDATE";
