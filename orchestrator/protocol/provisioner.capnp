# The XCE provisioner protocol: what a provisioner (and, for the simulated world, a worker and
# an admin tool) exchanges with the controller. See docs/protocol.md for the framing, the
# request/reply/push rules, leases, epochs and resync.
#
# Conventions:
#   * Wall-clock times are unix milliseconds (Int64, field names ending in "Ms" with "Unix"),
#     durations are milliseconds (UInt32/UInt64 ending in "Ms").
#   * Text fields are UTF-8. An empty Text means "not set".
#   * Every message on the wire is one Envelope. requestId 0 marks a push; any other value is a
#     request (client -> controller) or the one reply to it (same id, controller -> client).
#   * New fields and union members may be added at the end in later versions; a receiver that
#     sees an unknown union member answers `error(unsupported)` (requests) or ignores it (pushes).

@0xee9e5e45a836eaae;

# ---------------------------------------------------------------------------------------------
# Common values

struct Epoch {
  # A lease epoch: the controller's durable HA term and a sequence number within that term.
  # Ordered lexicographically (term first). (0, 0) means "no epoch".
  term @0 :UInt64;
  seq @1 :UInt64;
}

enum Role {
  provisioner @0;
  worker @1;
  admin @2;
}

# ---------------------------------------------------------------------------------------------
# Join

struct JoinProvisioner {
  instanceId @0 :Text;          # informational: the lease holder is the certificate identity and leaseInstance
  version @1 :Text;             # software version, informational
  providers @2 :List(Text);     # providers whose facts, host events and leases this instance wants
  cluster @3 :Text;             # cluster name, informational (the controller may refuse a mismatch)
  leaseInstance @4 :Text;       # the process instance: connections of one certificate identity with the
                                # same leaseInstance are one lease holder, other values other holders
                                # ("" = legacy: the identity alone is the holder). Not a credential:
                                # it only tells apart processes the certificate already authenticates.
}

struct JoinWorker {
  # Sent by a node manager's worker role.
  hostName @0 :Text;            # required
  instanceId @1 :Text;          # the id the cloud assigned ("" for a static host)
  instanceKey @2 :Text;         # <op_id>-<index>, "" when unknown
  opId @3 :Text;
  template @4 :Text;            # host template name
  address @5 :Text;             # the address the worker sees for itself, informational
  version @6 :Text;
  slots @7 :UInt32;
  joinToken @8 :Text;           # the host's credential (docs/protocol.md, "Authentication and roles")
}

struct Joined {
  # Reply to every join.
  role @0 :Role;
  term @1 :UInt64;              # the controller's current HA term
  primary @2 :Text;             # address of the primary (this controller when it is the primary)
  controllerId @3 :Text;
  heartbeatIntervalMs @4 :UInt32;  # workers heartbeat at this interval
  leaseTtlMs @5 :UInt32;        # the TTL the controller grants leases with
  serverTimeUnixMs @6 :Int64;   # informational only: never used for lease validity
  hostState @7 :HostState;      # worker joins only: the state the host is in after the join
}

# ---------------------------------------------------------------------------------------------
# Leases

struct LeaseRequest {
  # leaseAcquire: epoch is ignored (send (0,0)).
  # leaseRenew / leaseRelease: epoch is the epoch of the grant being renewed / released.
  provider @0 :Text;
  epoch @1 :Epoch;
}

struct LeaseGrant {
  provider @0 :Text;
  epoch @1 :Epoch;
  ttlMs @2 :UInt32;             # valid for ttlMs from when the request was SENT (client clock)
  holder @3 :Text;              # the holder the lease is granted to (the requester): identity[/leaseInstance]
}

struct LeaseDeny {
  provider @0 :Text;
  holder @1 :Text;              # current holder ("" during the grace after a term change with no holder)
  retryAfterMs @2 :UInt32;      # earliest useful time to ask again
  reason @3 :Text;              # human-readable: "held", "grace", "notHolder", "expired", ...
}

struct LeaseRevoked {
  # Push: the lease is no longer valid; stop mutating at once.
  provider @0 :Text;
  epoch @1 :Epoch;
  reason @2 :Text;
}

struct LeaseInfo {
  provider @0 :Text;
  holder @1 :Text;
  epoch @2 :Epoch;
  expiresInMs @3 :Int64;        # by the controller's clock; <= 0 means expired
  graceEndsInMs @4 :Int64;      # > 0 while the post-failover grace is still running
}

# ---------------------------------------------------------------------------------------------
# Facts

enum FactKind {
  requestIntent @0;    # an op is about to create `count` hosts of `template` (committed BEFORE any cloud call)
  instanceCreated @1;  # the cloud created instance `instanceId` for `instanceKey`
  expectedHost @2;     # an expected-host record: instanceId, template, hostName, address, joinDeadlineUnixMs
  returning @3;        # intent to return (terminate) the instance (committed BEFORE the cloud call)
  returned @4;         # the instance is gone in the cloud
  lost @5;             # the instance disappeared without us (spot reclaim, out-of-band delete)
  orphanReported @6;   # a tagged resource without a fact was found (detail: evidence)
  orphanAdopted @7;    # an orphan matched a live host and was adopted
}

struct Fact {
  kind @0 :FactKind;
  provider @1 :Text;            # required
  opId @2 :Text;                # required
  epoch @3 :Epoch;              # required: the provider lease epoch the fact was made under
  instanceKey @4 :Text;
  instanceId @5 :Text;
  template @6 :Text;
  hostName @7 :Text;
  address @8 :Text;
  count @9 :UInt32;
  joinDeadlineUnixMs @10 :Int64;  # expectedHost only
  detail @11 :Text;             # free text (evidence, reasons); at most 4096 bytes
  # Set by the controller when committed; ignored in commitFact:
  factId @12 :UInt64;           # strictly increasing per controller store
  committedUnixMs @13 :Int64;
  holder @14 :Text;             # the lease holder that committed it: identity[/leaseInstance]
}

struct Ack {
  factId @0 :UInt64;            # the committed fact's id (0 for acks that commit no fact)
  committedUnixMs @1 :Int64;
  hostState @2 :HostState;      # hostClose: closed (idle, closed at once) or closing (its work still
                                # runs; closed when it ends); hostDecommission: decommissioned;
                                # unknown for commitFact
}

enum RejectReason {
  staleEpoch @0;    # the epoch is not the provider's current lease epoch held by this connection
  notPrimary @1;    # this controller is not the primary: see `redirect`
  invalid @2;       # the message is malformed or misses required fields: see `message`
}

struct Reject {
  reason @0 :RejectReason;
  message @1 :Text;
  redirect @2 :Text;            # notPrimary: "host:port" of the primary, "" when unknown
  currentEpoch @3 :Epoch;       # staleEpoch: the provider's current lease epoch ((0,0) if none)
}

struct FactBatch {
  # commitFacts: facts to commit at once, all or nothing, at most 1000 (docs/protocol.md §6).
  # committed (the reply): the committed facts in the request's order, controller fields set.
  facts @0 :List(Fact);
}

struct QueryFacts {
  provider @0 :Text;            # required
  afterFactId @1 :UInt64;       # return facts with factId > afterFactId (0: all)
  limit @2 :UInt32;             # 0: controller default (1000); the reply says if more remain
}

struct FactList {
  provider @0 :Text;
  facts @1 :List(Fact);
  more @2 :Bool;                # true: ask again with afterFactId = last factId
}

# ---------------------------------------------------------------------------------------------
# Hosts

enum HostState {
  unknown @0;
  expected @1;          # an expected-host record, worker not joined yet
  joined @2;            # worker joined, state not yet known (transient)
  idle @3;              # joined, no work
  busy @4;              # joined, running work
  closed @5;            # closed and drained: takes no new work and runs none
  decommissioned @6;    # removed from the cluster; a rejoin is refused
  lost @7;              # was joined, connection gone past the loss timeout
  overdue @8;           # expected, past its join deadline without joining
  disconnected @9;      # joined, connection gone, not yet lost
  closing @10;          # closed while its work still runs: takes no new work; closed when the work ends
}

struct HostRef {
  # hostClose / hostDecommission. Identify the host by instanceId or hostName (instanceId wins).
  provider @0 :Text;
  epoch @1 :Epoch;              # the provider lease epoch (mutations are fenced like facts)
  instanceId @2 :Text;
  hostName @3 :Text;
  reason @4 :Text;
  force @5 :Bool;               # hostDecommission only: also a host running work (its work is stopped);
                                # without it a busy or closing host is refused (error refused)
}

struct HostStatusQuery {
  provider @0 :Text;            # "" = all providers (and static hosts)
  template @1 :Text;            # "" = all templates
}

struct HostInfo {
  hostName @0 :Text;
  instanceId @1 :Text;
  instanceKey @2 :Text;
  opId @3 :Text;
  provider @4 :Text;            # "" for hosts that joined without an expected-host record
  template @5 :Text;
  address @6 :Text;
  state @7 :HostState;
  idleSinceUnixMs @8 :Int64;    # idle and closed only
  joinDeadlineUnixMs @9 :Int64; # expected/overdue only
  joinedUnixMs @10 :Int64;      # first join of this host record (durable: kept across controller restarts)
  reclaimAtUnixMs @11 :Int64;   # the cloud reclaims the host then (an interruption notice, hostNotice); 0: none
}

struct HostList {
  hosts @0 :List(HostInfo);
}

enum HostEventKind {
  joined @0;
  idleSince @1;         # the host became idle at idleSinceUnixMs
  lost @2;
  joinOverdue @3;       # expected host past its join deadline
  busy @4;
  decommissioned @5;
  closed @6;            # closed and drained (at once for an idle host, else when its work ends)
  closing @7;           # closed while running work (hostClose of a busy host)
  interruptionNotice @8; # the cloud will reclaim the host at host.reclaimAtUnixMs (hostNotice): checkpoint
                         # or requeue its work; the host is closed (no new work)
}

struct HostEvent {
  # Push to provisioners (those whose providers include the host's provider, or all for
  # hosts without a provider).
  kind @0 :HostEventKind;
  host @1 :HostInfo;
  timeUnixMs @2 :Int64;
}

struct HostNotice {
  # hostNotice: the cloud gave the host an interruption notice (a spot reclaim is coming). The
  # controller closes it (no new work), records the reclaim time (HostInfo.reclaimAtUnixMs), counts
  # it out of its supply (neither idle nor in flight) and pushes an interruptionNotice host event.
  # Identify the host by instanceId or hostName (instanceId wins), fenced like hostClose.
  provider @0 :Text;
  epoch @1 :Epoch;
  instanceId @2 :Text;
  hostName @3 :Text;
  kind @4 :Text;                # the notice's kind, e.g. "spot-interruption"
  reclaimAtUnixMs @5 :Int64;    # when the cloud reclaims the instance
  detail @6 :Text;              # free text (where the notice came from); at most 4096 bytes
}

# ---------------------------------------------------------------------------------------------
# Demand

struct TemplateDemand {
  template @0 :Text;
  wanted @1 :UInt32;            # more hosts that would let pending work run (pending hosts - idle, >= 0)
  pendingHosts @2 :UInt32;      # hosts asked for by pending work
  inFlight @3 :UInt32;          # expected hosts not yet joined (not overdue)
  joined @4 :UInt32;            # joined workers (idle + busy + closed)
  idle @5 :UInt32;
  busy @6 :UInt32;
}

struct DemandSnapshot {
  # Push, level-triggered: the whole picture, every template the controller knows.
  # seq increases by at least 1 with every snapshot of a controller term; a receiver keeps the
  # snapshot with the highest (term, seq) and drops older ones.
  seq @0 :UInt64;
  term @1 :UInt64;
  timeUnixMs @2 :Int64;
  templates @3 :List(TemplateDemand);
}

# ---------------------------------------------------------------------------------------------
# Status (xceprov status) and admin (simulated controller only)

struct ControllerStatus {
  controllerId @0 :Text;
  term @1 :UInt64;
  primary @2 :Text;
  leases @3 :List(LeaseInfo);
  demand @4 :DemandSnapshot;
  hosts @5 :List(HostInfo);
  connections @6 :UInt32;
  pendingWork @7 :UInt32;
  runningWork @8 :UInt32;
  termStartedMs @9 :Int64;      # wall-clock unix ms at which the current term started (durable with
                                # the term; 0 from a controller that does not report it)
  reasons @10 :List(TemplateReason);  # the latest reason per template its provisioners reported
}

struct WorkerHeartbeat {
  hostName @0 :Text;
  runningJobs @1 :UInt32;       # informational
}

struct WorkerStop {
  # Push to a worker: leave the cluster (decommissioned) and do not rejoin.
  reason @0 :Text;
}

struct AdminSubmit {
  template @0 :Text;
  hosts @1 :UInt32;
  durationMs @2 :UInt64;
}

struct AdminRevoke {
  provider @0 :Text;
  reason @1 :Text;
}

struct AdminReply {
  message @0 :Text;             # one line, shown to the user
  term @1 :UInt64;
  workId @2 :UInt64;
}

enum ErrorCode {
  invalid @0;        # malformed request or missing fields
  notJoined @1;      # the connection has not joined (or joined with another role)
  notPrimary @2;     # see `redirect`
  refused @3;        # e.g. a decommissioned host's rejoin
  unknownHost @4;
  unsupported @5;    # unknown request type
  internal @6;
  permissionDenied @7;  # the role may not send this request, or the credential is missing or wrong
}

struct Error {
  code @0 :ErrorCode;
  message @1 :Text;
  redirect @2 :Text;            # notPrimary: "host:port" of the primary
}

# Why a provisioner launched what it did for a template, or nothing (docs/daemon.md, "Why nothing
# launched"): the scheduler can say why work pends. Sent after a pass when they changed, and at
# least every few minutes; each report replaces the sender's previous one.
struct TemplateReason {
  template @0 :Text;
  code @1 :Text;                # launched | budget | cooldown | max-instances | granularity | backoff |
                                # quota | no-lease | breaker-open | open-op | no-offering (more may come)
  detail @2 :Text;              # one line naming every provider's reason
  provider @3 :Text;            # the provider of the reason that held the demand back ("" for none)
  untilUnixMs @4 :Int64;        # when the hold ends, 0 when not known
}

struct ProvisionerReport {
  reasons @0 :List(TemplateReason);  # one per template with unmet demand or a launch
  timeUnixMs @1 :Int64;              # when the provisioner decided them (its clock, informational)
}

# ---------------------------------------------------------------------------------------------
# The one top-level message

struct Envelope {
  requestId @0 :UInt64;         # != 0: a request or its reply; 0: a push
  union {
    # --- requests (client -> controller); each gets exactly one reply with the same requestId
    joinProvisioner @1 :JoinProvisioner;  # -> joined | error
    joinWorker @2 :JoinWorker;            # -> joined | error(refused)
    leaseAcquire @3 :LeaseRequest;        # -> leaseGrant | leaseDeny | error
    leaseRenew @4 :LeaseRequest;          # -> leaseGrant | leaseDeny | error
    leaseRelease @5 :LeaseRequest;        # -> ok | leaseDeny | error
    commitFact @6 :Fact;                  # -> ack | reject
    queryFacts @7 :QueryFacts;            # -> factList | error
    hostClose @8 :HostRef;                # -> ack {hostState} | reject | error(unknownHost)
    hostDecommission @9 :HostRef;         # -> ack | reject | error(unknownHost | refused: runs work, no force)
    hostStatus @10 :HostStatusQuery;      # -> hostList | error
    requestDemand @11 :Void;              # -> demand (the current snapshot, as a reply)
    queryStatus @12 :Void;                # -> status
    heartbeat @13 :WorkerHeartbeat;       # -> ok (workers)
    adminFailover @14 :Void;              # -> adminReply (admin channel only)
    adminSubmit @15 :AdminSubmit;         # -> adminReply
    adminRevoke @16 :AdminRevoke;         # -> adminReply
    adminShutdown @17 :Void;              # -> adminReply

    # --- replies (controller -> client), requestId = the request's
    joined @18 :Joined;
    leaseGrant @19 :LeaseGrant;
    leaseDeny @20 :LeaseDeny;
    ack @21 :Ack;
    reject @22 :Reject;
    factList @23 :FactList;
    hostList @24 :HostList;
    status @25 :ControllerStatus;
    ok @26 :Void;
    adminReply @27 :AdminReply;
    error @28 :Error;

    # --- replies or pushes (requestId 0 when pushed)
    demand @29 :DemandSnapshot;           # pushed on change and right after a provisioner joins

    # --- pushes (controller -> client), requestId = 0
    hostEvent @30 :HostEvent;
    leaseRevoked @31 :LeaseRevoked;
    workerStop @32 :WorkerStop;

    # --- added later (new members go at the end)
    commitFacts @33 :FactBatch;           # -> committed | reject | error(invalid: more than 1000 facts)
    committed @34 :FactBatch;             # reply to commitFacts
    reportReasons @35 :ProvisionerReport; # -> ok (provisioners)
    hostNotice @36 :HostNotice;           # -> ack {hostState} | reject | error(unknownHost)
  }
}
