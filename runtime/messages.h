// messages.h — the hops of a schedule as messages between two ranks, in the one order both ends
// post them. NCCL matches a pair's sends and receives in posting order (tags are ignored), so
// each end must post a pair's messages in the same order, and an order the host can follow
// without waiting for itself: by the simulated end of the op that produces each message (ties
// by tag). A receive can be posted at once, a send once its op is enqueued; a send ordered
// before a receive that an op needs ends, in the simulation, before that op starts, so its op
// comes earlier on the same device. The GPU engine posts in this order; tests check it.
#pragma once

#include <map>
#include <vector>

#include "optpipe/problem.h"
#include "optpipe/schedule.h"

namespace optpipe::runtime {

struct Message {
  int peer = -1;
  bool send = false;
  int tag = 0;         // op id of the consumer, F(s, i) or B(s, i), as the CPU engine tags it
  Op local;            // the op on this rank that sends it, or that needs it
  double time_us = 0;  // simulated end of the op that produces it
};

// Device `d`'s messages per peer, in posting order. `s` must be valid for `p`.
std::map<int, std::vector<Message>> message_order(const Problem& p, const Schedule& s, int d);

}  // namespace optpipe::runtime
