package simserver

import (
	"fmt"
	"net/http"
	"time"
)

// EventPreemptNotice is the instance event of a preemption announced ahead.
const EventPreemptNotice = "preempt_notice"

// Notice is what an instance's metadata endpoint answers while a
// preemption is announced, shaped like AWS's spot/instance-action
// ({"action": "terminate", "time": "2017-09-18T08:22:00Z"}): the action and
// when it happens.
type Notice struct {
	Action string    `json:"action"`
	Time   time.Time `json:"time"`
}

// PreemptIn announces that running instance id of cloudName will be
// preempted in notice: its metadata endpoint answers the notice at once,
// and the preemption happens at its time, unless the instance is deleted
// before. A notice of zero preempts now (as Preempt does).
func (s *Server) PreemptIn(cloudName, id string, notice time.Duration) error {
	if notice <= 0 {
		return s.Preempt(cloudName, id)
	}
	s.mu.Lock()
	defer s.unlock()
	c, in, err := s.running(cloudName, id)
	if err != nil {
		return err
	}
	now := s.clock.Now()
	in.NoticeAt, in.PreemptAt = now, now.Add(notice)
	in.event(now, EventPreemptNotice, fmt.Sprintf("spot capacity will be reclaimed at %s", in.PreemptAt.UTC().Format(time.RFC3339)))
	s.arm(c, in, now)
	s.save()
	return nil
}

// notice is what in's metadata endpoint announces at now, if anything.
func (in *instance) notice(now time.Time) (Notice, bool) {
	if in.Status != StatusRunning || in.PreemptAt.IsZero() || in.NoticeAt.IsZero() || now.Before(in.NoticeAt) {
		return Notice{}, false
	}
	return Notice{Action: "terminate", Time: in.PreemptAt}, true
}

// metadataRoutes adds the instances' metadata endpoint: what a program on
// the instance reads about itself, as a cloud's metadata server answers it,
// without an API key (the server binds loopback only, and the sandbox of
// an instance finds its URL in GPUPROV_SIM_METADATA).
//
//	GET /metadata/{cloud}/{id}/interruption   200 Notice while a preemption is announced;
//	                                          404 otherwise (as AWS's spot/instance-action)
func (s *Server) metadataRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /metadata/{cloud}/{id}/interruption", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		var (
			n  Notice
			ok bool
		)
		if c := s.clouds[r.PathValue("cloud")]; c != nil {
			if in := s.lookup(c, r.PathValue("id")); in != nil {
				n, ok = in.notice(s.clock.Now())
			}
		}
		s.unlock()
		if !ok {
			writeError(w, errorf(http.StatusNotFound, CodeNotFound, "no interruption announced"))
			return
		}
		writeJSON(w, http.StatusOK, n)
	})
}

// metadataURL is the metadata endpoint of instance id of cloud.
func (s *Server) metadataURL(cloud, id string) string {
	return fmt.Sprintf("%s/metadata/%s/%s", s.url, cloud, id)
}
