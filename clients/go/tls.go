package lockbroker

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"
)

// newTransport is the connection pool of a client: plain HTTP/1.1 (the
// broker speaks nothing else), with the TLS settings of the options.
func newTransport(s settings) (*http.Transport, error) {
	config, err := tlsConfig(s)
	if err != nil {
		return nil, err
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         dialer.DialContext,
		TLSClientConfig:     config,
		TLSHandshakeTimeout: 5 * time.Second,
		MaxIdleConns:        64,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     idleAtMost,
	}, nil
}

// idleAtMost is how long a pooled connection may idle and still be used:
// well under the broker's idle close (its header_read_timeout_ms, 10 s by
// default), since a request sent on a connection just as the broker closes
// it is lost on the way, and an acquire's outcome is then unknown.
const idleAtMost = 5 * time.Second

// tlsConfig is the TLS configuration the options ask for (nil: Go's
// defaults, the system's roots).
func tlsConfig(s settings) (*tls.Config, error) {
	if s.tlsConfig == nil && s.caFile == "" && s.certFile == "" {
		return nil, nil
	}
	config := &tls.Config{MinVersion: tls.VersionTLS12}
	if s.tlsConfig != nil {
		config = s.tlsConfig.Clone()
	}
	if s.caFile != "" {
		pem, err := os.ReadFile(s.caFile)
		if err != nil {
			return nil, &Error{Code: CodeConfig, Message: "reading the CA file", Err: err}
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, &Error{Code: CodeConfig, Message: fmt.Sprintf("no PEM certificate in the CA file %s", s.caFile)}
		}
		config.RootCAs = roots
	}
	if s.certFile != "" || s.keyFile != "" {
		cert, err := tls.LoadX509KeyPair(s.certFile, s.keyFile)
		if err != nil {
			return nil, &Error{Code: CodeConfig, Message: "loading the client certificate", Err: err}
		}
		// Presented whenever the broker asks for one, even if its issuer
		// is not among the CAs the broker names (crypto/tls would then
		// send none): the broker decides, and says why it refuses.
		config.Certificates = nil
		config.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &cert, nil
		}
	}
	return config, nil
}

// isTLSFailure: err comes from a TLS handshake that failed, on either side:
// a certificate we do not trust, or an alert the broker sent (it refused our
// certificate, or we sent none). With TLS 1.3 the broker judges the client's
// certificate after the client's side of the handshake is done, so its
// refusal arrives as an alert on the first read, after the request was
// written: it is still a handshake failure, not a request that may have
// been carried out.
func isTLSFailure(err error) bool {
	var (
		unknownAuthority x509.UnknownAuthorityError
		invalid          x509.CertificateInvalidError
		hostname         x509.HostnameError
		record           tls.RecordHeaderError
		op               *net.OpError
	)
	switch {
	case errors.As(err, &unknownAuthority), errors.As(err, &invalid), errors.As(err, &hostname), errors.As(err, &record):
		return true
	case errors.As(err, &op) && op.Op == "remote error":
		// crypto/tls reports the peer's alerts as net.OpError{Op: "remote error"}.
		return true
	}
	return false
}
