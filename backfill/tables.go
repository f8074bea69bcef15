package backfill

import (
	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
)

// TableByName returns the table of the store's catalog with that name; ok
// is false if there is none. Two tables of the same name are an error: the
// store does not require names to be unique, a lookup by name does.
func TableByName(s *lsm.Store, name string) (def lsm.TableDef, ok bool, err error) {
	for _, d := range s.Tables() {
		if d.Name != name {
			continue
		}
		if ok {
			return lsm.TableDef{}, false, errors.Newf("lsmstats/backfill: tables %d and %d are both named %q", def.ID, d.ID, name)
		}
		def, ok = d, true
	}
	return def, ok, nil
}

// createNamed returns the id of the table named def.Name, created with the
// next free id if there is none. An existing table of that name must have
// def's definition, but for its id.
func createNamed(s *lsm.Store, def lsm.TableDef) (uint32, error) {
	if d, ok, err := TableByName(s, def.Name); err != nil {
		return 0, err
	} else if ok {
		def.ID = d.ID
		if err := s.CreateTable(def); err != nil { // a no-op for the same definition
			return 0, errors.Wrapf(err, "lsmstats/backfill: table %q", def.Name)
		}
		return d.ID, nil
	}
	// The next id above the catalog's largest; a table created under it
	// meanwhile (another job opening) makes CreateTable refuse it: try the
	// next one.
	for range 16 {
		var id uint32 = 1
		for _, d := range s.Tables() {
			if d.ID >= id && d.ID < keys.MetaTable-1 {
				id = d.ID + 1
			}
		}
		def.ID = id
		err := s.CreateTable(def)
		if err == nil {
			return id, nil
		}
		if _, taken := s.Table(id); taken != nil {
			return 0, err // not a race: the table was not created
		}
	}
	return 0, errors.Newf("lsmstats/backfill: no free table id for %q", def.Name)
}
