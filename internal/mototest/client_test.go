package mototest_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/org/gpuprov/internal/mototest"
)

// The race InMemoryBody removes, replayed in a fixed order: the request's
// last bytes reach the server; the server answers with a body too large
// for the transport's read buffer; the SDK gets the answer, closes its
// request body and starts reading the answer's body; only then does the
// transport finish writing the request (read the body once more). With
// the SDK's own body that last read fails and the transport closes the
// connection under the answer ("use of closed network connection"); with
// the body in memory the answer is read whole.
func TestInMemoryBodyKeepsTheAnswer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const vpcs = 2000 // about 150 kB of answer
	var answer bytes.Buffer
	answer.WriteString(`<?xml version="1.0" encoding="UTF-8"?><DescribeVpcsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><vpcSet>`)
	for i := range vpcs {
		fmt.Fprintf(&answer, "<item><vpcId>vpc-%08x</vpcId><cidrBlock>10.0.0.0/16</cidrBlock><isDefault>false</isDefault></item>\n", i)
	}
	answer.WriteString(`</vpcSet></DescribeVpcsResponse>`)
	var served sync.WaitGroup
	served.Add(1)
	go func() { // one raw HTTP/1.1 exchange
		defer served.Done()
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			t.Error(err)
			return
		}
		io.Copy(io.Discard, r.Body)
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", answer.Len())
		c.Write(answer.Bytes()) // fails once the client has closed: nothing to report
	}()

	reading := make(chan struct{}) // the SDK is reading the answer's body
	tr := &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &lastWriteWaits{Conn: c, until: reading}, nil
	}}
	cl := ec2.New(ec2.Options{Region: "us-east-1", BaseEndpoint: awssdk.String("http://" + l.Addr().String()), RetryMaxAttempts: 1,
		HTTPClient:  &http.Client{Transport: mototest.InMemoryBody{Next: signalReading{next: tr, reading: reading}}},
		Credentials: credentials.NewStaticCredentialsProvider(mototest.KeyID, mototest.Secret, "")})
	out, err := cl.DescribeVpcs(context.Background(), &ec2.DescribeVpcsInput{})
	if err != nil {
		t.Fatalf("DescribeVpcs: %v", err)
	}
	if len(out.Vpcs) != vpcs {
		t.Fatalf("%d VPCs read, want %d", len(out.Vpcs), vpcs)
	}
	served.Wait()
}

// lastWriteWaits is a connection whose write that completes the request
// (headers and Content-Length bytes of body) returns only once until is
// closed.
type lastWriteWaits struct {
	net.Conn
	until   <-chan struct{}
	written bytes.Buffer
	done    bool
}

func (c *lastWriteWaits) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if c.done || err != nil {
		return n, err
	}
	c.written.Write(b[:n])
	head, body, ok := strings.Cut(c.written.String(), "\r\n\r\n")
	if !ok {
		return n, err
	}
	var length int
	for _, line := range strings.Split(head, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(k, "Content-Length") {
			length, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	if len(body) >= length {
		c.done = true
		<-c.until
	}
	return n, err
}

// signalReading closes reading at the first read of an answer's body.
type signalReading struct {
	next    http.RoundTripper
	reading chan struct{}
}

func (s signalReading) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.next.RoundTrip(r)
	if err == nil {
		resp.Body = &firstRead{ReadCloser: resp.Body, signal: s.reading}
	}
	return resp, err
}

type firstRead struct {
	io.ReadCloser
	signal chan struct{}
	once   sync.Once
}

func (f *firstRead) Read(p []byte) (int, error) {
	f.once.Do(func() { close(f.signal) })
	return f.ReadCloser.Read(p)
}
