//! The per-run side of the loaded programs: a run's slot in the run maps (its scope, its share
//! of the ring buffer, its counters), the tracked set, and what the programs counted for it.

use aet_common::{RunLimit, ScopeIndex, counter, runs};
use aya::maps::PerCpuValues;

use super::{Counters, LoadError, Pinned, Programs, Scope, map_err, possible_cpus};

impl Programs {
    /// Registers a run: a free slot gets the scope, a share of the ring buffer of `quota` bytes,
    /// and zeroed counters. For a process-tree scope the caller tracks the tree ([`Self::track`]).
    pub fn register(&mut self, scope: &Scope, quota: u64) -> Result<u32, LoadError> {
        let _pinned = Pinned::new();
        if let Scope::Cgroup { path, level, .. } = scope
            && *level >= runs::MAX_CGROUP_LEVEL
        {
            return Err(LoadError::CgroupTooDeep {
                path: path.clone(),
                level: *level,
                max: runs::MAX_CGROUP_LEVEL,
            });
        }
        if self.slots.iter().flatten().any(|s| match (s, scope) {
            (Scope::Cgroup { id: a, .. }, Scope::Cgroup { id: b, .. }) => a == b,
            (Scope::Uid(a), Scope::Uid(b)) => a == b,
            (Scope::Pid(a), Scope::Pid(b)) => a == b,
            _ => false,
        }) {
            return Err(LoadError::ScopeTaken(scope.describe()));
        }
        let slot = self
            .slots
            .iter()
            .position(Option::is_none)
            .ok_or(LoadError::NoSlot(runs::MAX_RUNS))? as u32;
        self.clear_slot(slot)?;
        self.run_limits
            .set(slot, RunLimit { consumed: 0, quota }, 0)
            .map_err(map_err(aet_common::maps::RUN_LIMITS))?;
        match scope {
            Scope::Cgroup { id, .. } => self
                .scope_cgroups
                .insert(id, slot, 0)
                .map_err(map_err(aet_common::maps::SCOPE_CGROUPS))?,
            Scope::Uid(uid) => self
                .scope_uids
                .insert(uid, slot, 0)
                .map_err(map_err(aet_common::maps::SCOPE_UIDS))?,
            Scope::Pid(_) => {}
        }
        self.since[slot as usize] = (self.misses()?, self.preemptions()?);
        self.slots[slot as usize] = Some(scope.clone());
        self.write_index()?;
        Ok(slot)
    }

    /// Stops recording a run: its scope entries and tracked tasks go, so the programs produce
    /// nothing more for it. Its slot stays taken (its counters readable) until [`Self::release`].
    pub fn unregister(&mut self, slot: u32) -> Result<(), LoadError> {
        let _pinned = Pinned::new();
        match self.slots.get(slot as usize).cloned().flatten() {
            Some(Scope::Cgroup { id, .. }) => {
                let _ = self.scope_cgroups.remove(&id);
            }
            Some(Scope::Uid(uid)) => {
                let _ = self.scope_uids.remove(&uid);
            }
            _ => {}
        }
        for tid in self.tracked(slot) {
            let _ = self.tracked.remove(&tid);
        }
        // The index still lists the slot's level until release (a stale level costs a
        // look-up), but its generation changes: no remembered decision for this run holds.
        self.write_index()
    }

    /// Frees a slot once its records are read and its counters taken.
    pub fn release(&mut self, slot: u32) -> Result<(), LoadError> {
        let _pinned = Pinned::new();
        self.run_limits
            .set(slot, RunLimit::default(), 0)
            .map_err(map_err(aet_common::maps::RUN_LIMITS))?;
        if let Some(s) = self.slots.get_mut(slot as usize) {
            *s = None;
        }
        self.write_index()
    }

    /// Zeroes a slot's counters and production count.
    fn clear_slot(&mut self, slot: u32) -> Result<(), LoadError> {
        self.run_produced
            .set(slot, 0, 0)
            .map_err(map_err(aet_common::maps::RUN_PRODUCED))?;
        let cpus = possible_cpus()? as usize;
        for c in 0..counter::COUNT {
            let zeros = PerCpuValues::try_from(vec![0u64; cpus]).map_err(LoadError::Cpus)?;
            self.counters
                .set(slot * counter::COUNT + c, zeros, 0)
                .map_err(map_err(aet_common::maps::COUNTERS))?;
        }
        Ok(())
    }

    /// Rewrites which scope maps the programs look in.
    fn write_index(&mut self) -> Result<(), LoadError> {
        self.generation = self.generation.wrapping_add(1);
        let mut index = ScopeIndex {
            generation: self.generation,
            ..ScopeIndex::default()
        };
        for s in self.slots.iter().flatten() {
            match s {
                Scope::Cgroup { level, .. } => index.cgroup_levels |= 1 << level,
                Scope::Uid(_) => index.uids += 1,
                Scope::Pid(_) => {}
            }
        }
        self.scope_index
            .set(0, index, 0)
            .map_err(map_err(aet_common::maps::SCOPE_INDEX))
    }

    /// Tells the programs how much of a run's records userspace has read.
    pub fn set_consumed(&mut self, slot: u32, consumed: u64, quota: u64) -> Result<(), LoadError> {
        let _pinned = Pinned::new();
        self.run_limits
            .set(slot, RunLimit { consumed, quota }, 0)
            .map_err(map_err(aet_common::maps::RUN_LIMITS))
    }

    /// Adds a task to a run's tracked set (for a process tree, its threads and descendants).
    pub fn track(&mut self, slot: u32, tid: u32) -> Result<(), LoadError> {
        let _pinned = Pinned::new();
        self.tracked
            .insert(tid, slot, 0)
            .map_err(map_err(aet_common::maps::TRACKED))?;
        self.write_index()
    }

    /// Removes a task from the tracked set (a stale entry for a task that is gone).
    pub fn untrack(&mut self, tid: u32) {
        let _pinned = Pinned::new();
        let _ = self.tracked.remove(&tid);
        let _ = self.write_index();
    }

    /// Tasks in a run's tracked set.
    pub fn tracked(&self, slot: u32) -> Vec<u32> {
        let _pinned = Pinned::new();
        self.tracked
            .iter()
            .filter_map(Result::ok)
            .filter(|&(_, s)| s == slot)
            .map(|(tid, _)| tid)
            .collect()
    }

    /// What the programs have put in the ring for a run, in ring bytes.
    pub fn produced(&self, slot: u32) -> Result<u64, LoadError> {
        let _pinned = Pinned::new();
        self.run_produced
            .get(&slot, 0)
            .map_err(map_err(aet_common::maps::RUN_PRODUCED))
    }

    /// Reads a run's kernel-side counters.
    pub fn counters(&self, slot: u32) -> Result<Counters, LoadError> {
        let _pinned = Pinned::new();
        let mut out = Counters {
            totals: vec![0; counter::COUNT as usize],
            per_cpu: Vec::new(),
            skipped: self.misses()?.saturating_sub(self.since[slot as usize].0),
            preempted: self
                .preemptions()?
                .saturating_sub(self.since[slot as usize].1),
        };
        for idx in 0..counter::COUNT {
            let values = self
                .counters
                .get(&(slot * counter::COUNT + idx), 0)
                .map_err(map_err(aet_common::maps::COUNTERS))?;
            for (cpu, v) in values.iter().enumerate() {
                if out.per_cpu.len() <= cpu {
                    out.per_cpu.push(vec![0; counter::COUNT as usize]);
                }
                out.per_cpu[cpu][idx as usize] = *v;
                out.totals[idx as usize] += *v;
            }
        }
        Ok(out)
    }
}
